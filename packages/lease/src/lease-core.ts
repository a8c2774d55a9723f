import { isPlanted } from "@warden/common";
import type { LeaseConfig } from "./lease-config.js";
import type { LeaseEffect, LeaseInput, LeaseState, LeaseStep, PendingWrite, SeenKey } from "./lease-state.js";

/**
 * The leader lease as one pure transition. Safety rests on two
 * rules, each on the deciding coordinator's own clock:
 * - a follower takes over only when the key's revision has not changed for a
 *   whole lease since it first SAW that revision (seeing is after the write
 *   committed, which is after the leader sent it);
 * - a leader counts its lease from when it SENT its last successful write and
 *   stops acting `marginMs` before that lease ends.
 * So the old leader stops before anyone else can start, up to the drift the
 * margin absorbs. Compare-and-set on the revision makes takeovers exclusive,
 * and the winning revision is the epoch, so epochs strictly increase.
 *
 * A leader whose lease ran out (its renewals did not land: a stream leader
 * election, a lost server) retries its own key every `retryMs` rather than
 * counting a whole lease like the others: while the key is still its own
 * revision nobody else has led, so winning it back is a resume in place. The
 * compare-and-set keeps that exclusive too — a rival's takeover writes a newer
 * revision first, and the retake then fails.
 *
 * The others, meanwhile, do not count the stream's silence as the leader's: a
 * follower whose read or takeover got no answer waits for a read that does,
 * and counts its whole lease from then. So after an outage the ex-leader has a
 * lease to win its key back before anyone else may try. A follower does so
 * once per revision: a stream that fails now and then must not put off the
 * takeover of a dead leader's key for ever.
 */

/** The starting state: a follower that has not read the key yet. */
export function initialLease(): LeaseStep {
  return { state: { kind: "follower", seen: undefined }, effects: [{ kind: "watch" }], wakeAtMs: undefined };
}

/**
 * True while this coordinator may act as leader at `nowMs`. Checked against
 * the clock, not only the state: a process that was paused past its margin
 * must not act on a timer that fires before the tick that steps it down.
 */
export function isLeaderAt(config: LeaseConfig, state: LeaseState, nowMs: number): boolean {
  return state.kind === "leader" && nowMs < state.leaseUntilMs - config.marginMs;
}

/** The epoch while leading, else undefined. */
export function leaseEpoch(state: LeaseState): number | undefined {
  return state.kind === "leader" ? state.epoch : undefined;
}

/** A follower retakes the key at once when it led on it and the key is still its own (see the file's comment). */
function resumes(config: LeaseConfig, seen: SeenKey | undefined, resuming: true | undefined): boolean {
  return resuming === true && seen !== undefined && seen.revision > 0 && seen.holder === config.holder;
}

function wakeAt(config: LeaseConfig, state: LeaseState): number | undefined {
  switch (state.kind) {
    case "follower":
      if (state.seen === undefined) return undefined;
      if (resumes(config, state.seen, state.resuming)) return state.seen.sinceMs + config.retryMs;
      // In doubt a follower waits for a read to answer (an entry), not for time.
      return state.doubt === true ? undefined : state.seen.sinceMs + config.leaseMs;
    case "leader": {
      const stepDownAt = state.leaseUntilMs - config.marginMs;
      return state.pending === undefined ? Math.min(state.nextRenewAtMs, stepDownAt) : stepDownAt;
    }
    case "candidate":
    case "stepping-down":
      // The adapter bounds every write with a deadline, so a result always comes.
      return undefined;
  }
}

function step(config: LeaseConfig, state: LeaseState, effects: readonly LeaseEffect[] = []): LeaseStep {
  return { state, effects, wakeAtMs: wakeAt(config, state) };
}

/**
 * A newer revision restarts the follower's count; the same one never does.
 * Older ones are stale reads — unless the stream went back (`rewound`): then
 * the older key is the truth, and its count starts now like any news. (Taking
 * it on late only delays a takeover; a write from the lost revision is refused.)
 */
function observe(seen: SeenKey | undefined, input: Extract<LeaseInput, { kind: "entry" }>): SeenKey | undefined {
  const rewound = input.rewound === true && seen !== undefined && input.revision < seen.revision;
  if (seen !== undefined && input.revision <= seen.revision && !rewound) return seen;
  return { revision: input.revision, holder: input.holder, sinceMs: input.nowMs };
}

/** After a write with no clear outcome the follower restarts its count: it retries at most once a lease. */
function restartCount(seen: SeenKey | undefined, nowMs: number): SeenKey | undefined {
  return seen === undefined ? undefined : { ...seen, sinceMs: nowMs };
}

/**
 * A key that never existed is created at once (create refuses if anyone beat
 * us). Any written key, deleted ones included, is taken only after a whole
 * lease without a change: a delete may come from an operator while the leader
 * still leads.
 */
function follow(config: LeaseConfig, seen: SeenKey | undefined, nowMs: number, fresh: boolean, resuming: true | undefined, doubt?: true): LeaseStep {
  if (seen === undefined) return step(config, { kind: "follower", seen });
  // (Planted bug "resume-any-key": an ex-leader retakes whatever key it sees at once.)
  const resume = isPlanted("resume-any-key") ? resuming === true : resumes(config, seen, resuming);
  const flag = resume ? ({ resuming: true } as const) : {};
  if (!resume && doubt === true) return step(config, { kind: "follower", seen, doubt });
  const expired = nowMs - seen.sinceMs >= (resume ? config.retryMs : config.leaseMs);
  if (seen.revision === 0 && (fresh || expired)) {
    const pending: PendingWrite = { kind: "create", expectedRevision: 0, sentAtMs: nowMs };
    return step(config, { kind: "candidate", seen, pending }, [{ kind: "create" }]);
  }
  if (seen.revision > 0 && expired) {
    const pending: PendingWrite = { kind: "update", expectedRevision: seen.revision, sentAtMs: nowMs };
    return step(config, { kind: "candidate", seen, pending, ...flag }, [{ kind: "update", expectedRevision: seen.revision }]);
  }
  return step(config, { kind: "follower", seen, ...flag });
}

function onFollower(config: LeaseConfig, state: Extract<LeaseState, { kind: "follower" }>, input: LeaseInput): LeaseStep {
  switch (input.kind) {
    case "entry": {
      const seen = observe(state.seen, input);
      // The stream answers again after a silence: the unchanged key counts a whole lease from now.
      const counted = state.doubt === true && seen === state.seen && seen !== undefined ? { ...seen, sinceMs: input.nowMs, recounted: true as const } : seen;
      return follow(config, counted, input.nowMs, seen !== state.seen, state.resuming);
    }
    case "tick":
      return follow(config, state.seen, input.nowMs, false, state.resuming, state.doubt);
    case "read-failed":
      // Once per revision: a stream that keeps failing now and then must not put a takeover off for ever.
      return follow(config, state.seen, input.nowMs, false, state.resuming, state.seen?.recounted === true ? state.doubt : true);
    case "write-ok":
    case "write-wrong-revision":
    case "write-failed":
      return step(config, state); // no write in flight: a late answer the adapter should not send
  }
}

function onCandidate(config: LeaseConfig, state: Extract<LeaseState, { kind: "candidate" }>, input: LeaseInput): LeaseStep {
  switch (input.kind) {
    case "entry":
      return step(config, { ...state, seen: observe(state.seen, input) });
    case "tick":
      return step(config, state);
    case "write-ok": {
      // Someone else's write is already newer than ours (two takeovers from one revision can both
      // be acknowledged by a clustered stream): ours is no win, and the newer holder's count starts.
      // (Planted bug "two-leaders-one-epoch": not checked.)
      if (!isPlanted("two-leaders-one-epoch") && state.seen !== undefined && state.seen.revision > input.revision && state.seen.holder !== config.holder) {
        return step(config, { kind: "follower", seen: state.seen });
      }
      const leaseUntilMs = state.pending.sentAtMs + config.leaseMs;
      if (input.nowMs >= leaseUntilMs - config.marginMs) {
        // Won, but the answer came too late to act on: renew first, and lead on that revision.
        const pending: PendingWrite = { kind: "update", expectedRevision: input.revision, sentAtMs: input.nowMs };
        return step(config, { ...state, pending }, [{ kind: "update", expectedRevision: input.revision }]);
      }
      const leader: LeaseState = {
        kind: "leader",
        epoch: input.revision,
        revision: input.revision,
        leaseUntilMs,
        nextRenewAtMs: state.pending.sentAtMs + config.renewMs,
        pending: undefined,
      };
      return step(config, leader, [{ kind: "become-leader", epoch: input.revision }]);
    }
    case "write-wrong-revision":
      // Someone wrote the key since: a resume is over, count a whole lease like the others.
      return step(config, { kind: "follower", seen: restartCount(state.seen, input.nowMs) }, [{ kind: "watch" }]);
    case "write-failed":
      // No answer: the stream may be down. Read until it answers (then, unless resuming, count a whole lease).
      if (state.resuming !== true && state.seen?.recounted === true) return step(config, { kind: "follower", seen: restartCount(state.seen, input.nowMs) });
      return step(config, { kind: "follower", seen: restartCount(state.seen, input.nowMs), ...(state.resuming === true ? { resuming: true } : { doubt: true }) }, [{ kind: "watch" }]);
    case "read-failed":
      return step(config, state);
  }
}

function stepDown(
  config: LeaseConfig,
  state: Extract<LeaseState, { kind: "leader" }>,
  reason: "lease-expiring" | "superseded",
  seen: SeenKey,
): LeaseStep {
  const effects: LeaseEffect[] = [{ kind: "step-down", epoch: state.epoch, reason }];
  if (reason === "superseded") effects.push({ kind: "watch" });
  // Only a lease that ran out may be resumed; a superseded leader follows the newer holder.
  const flag = reason === "lease-expiring" ? ({ resuming: true } as const) : {};
  if (state.pending !== undefined) return step(config, { kind: "stepping-down", seen, pending: state.pending, ...flag }, effects);
  return step(config, { kind: "follower", seen, ...flag }, effects);
}

function onLeader(config: LeaseConfig, state: Extract<LeaseState, { kind: "leader" }>, input: LeaseInput): LeaseStep {
  // As a follower the ex-leader counts a whole lease from now, like anyone else.
  const ownKey: SeenKey = { revision: state.revision, holder: config.holder, sinceMs: input.nowMs };
  switch (input.kind) {
    case "tick":
      if (input.nowMs >= state.leaseUntilMs - config.marginMs) return stepDown(config, state, "lease-expiring", ownKey);
      if (state.pending === undefined && input.nowMs >= state.nextRenewAtMs) {
        const pending: PendingWrite = { kind: "update", expectedRevision: state.revision, sentAtMs: input.nowMs };
        return step(config, { ...state, pending }, [{ kind: "update", expectedRevision: state.revision }]);
      }
      return step(config, state);
    case "entry":
      // Our own renewal echoed by the watch is answered by write-ok; anyone else's newer write ends our term.
      if (input.revision > state.revision && input.holder !== config.holder) {
        return stepDown(config, state, "superseded", { revision: input.revision, holder: input.holder, sinceMs: input.nowMs });
      }
      return step(config, state);
    case "write-ok": {
      if (state.pending === undefined || input.revision <= state.revision) return step(config, state);
      const sentAtMs = state.pending.sentAtMs;
      const renewed = { ...state, revision: input.revision, pending: undefined };
      return step(config, { ...renewed, leaseUntilMs: sentAtMs + config.leaseMs, nextRenewAtMs: sentAtMs + config.renewMs });
    }
    case "write-wrong-revision":
      return stepDown(config, { ...state, pending: undefined }, "superseded", ownKey);
    case "write-failed":
      // Keep leading on the old lease and retry soon; the tick steps down if nothing lands in time.
      return step(config, { ...state, pending: undefined, nextRenewAtMs: input.nowMs + config.retryMs });
    case "read-failed":
      return step(config, state); // a leader's renewals say more than a read
  }
}

function onSteppingDown(config: LeaseConfig, state: Extract<LeaseState, { kind: "stepping-down" }>, input: LeaseInput): LeaseStep {
  switch (input.kind) {
    case "entry":
      return step(config, { ...state, seen: observe(state.seen, input) });
    case "tick":
      return step(config, state);
    case "write-ok": {
      const seen: SeenKey = { revision: input.revision, holder: config.holder, sinceMs: input.nowMs };
      const flag = state.resuming === true ? ({ resuming: true } as const) : {};
      return step(config, { kind: "follower", seen: state.seen !== undefined && state.seen.revision > input.revision ? state.seen : seen, ...flag });
    }
    case "write-wrong-revision":
      return step(config, { kind: "follower", seen: restartCount(state.seen, input.nowMs) }, [{ kind: "watch" }]);
    case "write-failed":
      return step(config, { kind: "follower", seen: restartCount(state.seen, input.nowMs), ...(state.resuming === true ? { resuming: true } : {}) });
    case "read-failed":
      return step(config, state);
  }
}

/** The one transition: state and an observation in, the next state and the effects to run out. */
export function nextLease(config: LeaseConfig, state: LeaseState, input: LeaseInput): LeaseStep {
  switch (state.kind) {
    case "follower":
      return onFollower(config, state, input);
    case "candidate":
      return onCandidate(config, state, input);
    case "leader":
      return onLeader(config, state, input);
    case "stepping-down":
      return onSteppingDown(config, state, input);
  }
}
