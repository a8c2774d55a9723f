import { describe, expect, it } from "vitest";
import { Code, WardenError } from "@warden/common";
import { leaseConfig } from "./lease-config.js";
import { initialLease, isLeaderAt, leaseEpoch, nextLease } from "./lease-core.js";
import type { LeaseInput, LeaseState, LeaseStep } from "./lease-state.js";

const cfg = leaseConfig("me");

function run(state: LeaseState, ...inputs: LeaseInput[]): LeaseStep {
  let s: LeaseStep = { state, effects: [], wakeAtMs: undefined };
  for (const i of inputs) s = nextLease(cfg, s.state, i);
  return s;
}

const entry = (revision: number, holder: string | null, nowMs: number): LeaseInput => ({ kind: "entry", revision, holder, nowMs });
const tick = (nowMs: number): LeaseInput => ({ kind: "tick", nowMs });
const ok = (revision: number, nowMs: number): LeaseInput => ({ kind: "write-ok", revision, nowMs });

/** A leader that won revision 7 with a create sent at t=0, answered at t=10. */
function leaderAt7(): LeaseState {
  const s = run(initialLease().state, entry(0, null, 0), ok(7, 10));
  expect(s.state.kind).toBe("leader");
  return s.state;
}

describe("leaseConfig", () => {
  it("has the issue's defaults", () => {
    expect(cfg).toEqual({ holder: "me", renewMs: 1_000, leaseMs: 3_000, marginMs: 500, retryMs: 250 });
  });
  it.each([
    ["holder", () => leaseConfig("")],
    ["renewMs", () => leaseConfig("me", { renewMs: 0 })],
    ["leaseMs", () => leaseConfig("me", { leaseMs: 100 })],
    ["marginMs", () => leaseConfig("me", { marginMs: 2_000 })],
    ["retryMs", () => leaseConfig("me", { retryMs: 1_500 })],
  ])("refuses a bad %s with invalid_argument naming it", (field, make) => {
    let err: unknown;
    try {
      make();
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(WardenError);
    expect((err as WardenError).code).toBe(Code.InvalidArgument);
    expect((err as WardenError).message).toContain(field);
  });
});

describe("nextLease", () => {
  it("starts by watching, and creates a key that never existed at once", () => {
    expect(initialLease().effects).toEqual([{ kind: "watch" }]);
    const s = run(initialLease().state, entry(0, null, 5));
    expect(s.state.kind).toBe("candidate");
    expect(s.effects).toEqual([{ kind: "create" }]);
  });

  it("leads on the winning revision, counting the lease from when the write was sent", () => {
    const s = run(initialLease().state, entry(0, null, 0), ok(7, 10));
    expect(s.effects).toEqual([{ kind: "become-leader", epoch: 7 }]);
    expect(s.state).toMatchObject({ kind: "leader", epoch: 7, revision: 7, leaseUntilMs: 3_000, nextRenewAtMs: 1_000 });
    expect(s.wakeAtMs).toBe(1_000);
    expect(leaseEpoch(s.state)).toBe(7);
  });

  it("renews with the expected revision; a renewal keeps the epoch and extends the lease from its send time", () => {
    const renewing = run(leaderAt7(), tick(1_000));
    expect(renewing.effects).toEqual([{ kind: "update", expectedRevision: 7 }]);
    const renewed = run(renewing.state, ok(9, 1_040));
    expect(renewed.state).toMatchObject({ kind: "leader", epoch: 7, revision: 9, leaseUntilMs: 4_000, nextRenewAtMs: 2_000 });
  });

  it("steps down at leaseUntil − margin when renewals fail, before the lease ends", () => {
    let s = run(leaderAt7(), tick(1_000), { kind: "write-failed", nowMs: 2_000 });
    expect(s.state.kind).toBe("leader");
    expect(s.wakeAtMs).toBe(2_250); // retry
    s = run(s.state, tick(2_250), { kind: "write-failed", nowMs: 2_499 });
    expect(isLeaderAt(cfg, s.state, 2_499)).toBe(true);
    expect(isLeaderAt(cfg, s.state, 2_500)).toBe(false);
    expect(s.wakeAtMs).toBe(2_500); // the step-down comes before the next retry (2 749)
    s = run(s.state, tick(2_500));
    expect(s.effects).toEqual([{ kind: "step-down", epoch: 7, reason: "lease-expiring" }]);
    expect(s.state).toMatchObject({ kind: "follower", seen: { revision: 7, holder: "me", sinceMs: 2_500 } });
  });

  it("a paused leader is not leader on wake, even before its tick runs", () => {
    const s = leaderAt7();
    expect(isLeaderAt(cfg, s, 2_000)).toBe(true);
    expect(isLeaderAt(cfg, s, 60_000)).toBe(false);
    const woke = run(s, ok(8, 60_000)); // an answer queued during the pause is no renewal: nothing was pending
    expect(isLeaderAt(cfg, woke.state, 60_000)).toBe(false);
    expect(run(woke.state, tick(60_001)).effects).toEqual([{ kind: "step-down", epoch: 7, reason: "lease-expiring" }]);
  });

  it("a stale renewal in flight at step-down is waited for, then the ex-leader follows", () => {
    const s = run(leaderAt7(), tick(2_000), tick(2_500));
    expect(s.state.kind).toBe("stepping-down");
    const after = run(s.state, ok(9, 2_600));
    expect(after.state).toEqual({ kind: "follower", seen: { revision: 9, holder: "me", sinceMs: 2_600 }, resuming: true });
  });

  it("an ex-leader whose lease ran out retakes its own key every retryMs, not after a whole lease: a win is a resume on the next revision", () => {
    // Renewals fail from t=1 000 (the stream is electing a leader); the lease runs out at 2 500.
    let s = run(leaderAt7(), tick(1_000), { kind: "write-failed", nowMs: 2_000 }, tick(2_250), { kind: "write-failed", nowMs: 2_499 }, tick(2_500));
    expect(s.state).toEqual({ kind: "follower", seen: { revision: 7, holder: "me", sinceMs: 2_500 }, resuming: true });
    expect(s.wakeAtMs).toBe(2_750);
    s = run(s.state, tick(2_750));
    expect(s.effects).toEqual([{ kind: "update", expectedRevision: 7 }]);
    // Still no quorum: again one retryMs later, as long as the key is its own.
    s = run(s.state, { kind: "write-failed", nowMs: 3_100 });
    expect(s.state).toMatchObject({ kind: "follower", resuming: true });
    expect(s.wakeAtMs).toBe(3_350);
    s = run(s.state, tick(3_350), ok(8, 3_400));
    expect(s.effects).toEqual([{ kind: "become-leader", epoch: 8 }]);
    expect(s.state).toMatchObject({ kind: "leader", epoch: 8, leaseUntilMs: 3_350 + cfg.leaseMs });
  });

  it("the resume ends when anyone else's write is seen or the retake is refused: then a whole lease, like the others", () => {
    const expired = run(leaderAt7(), tick(2_500)).state;
    const other = run(expired, entry(8, "other", 2_600));
    expect(other.state).toEqual({ kind: "follower", seen: { revision: 8, holder: "other", sinceMs: 2_600 } });
    expect(other.wakeAtMs).toBe(2_600 + cfg.leaseMs);
    expect(run(other.state, tick(2_850)).effects).toEqual([]);
    const refused = run(expired, tick(2_750), { kind: "write-wrong-revision", nowMs: 2_800 });
    expect(refused.effects).toEqual([{ kind: "watch" }]);
    expect(refused.state).toEqual({ kind: "follower", seen: { revision: 7, holder: "me", sinceMs: 2_800 } });
    expect(refused.wakeAtMs).toBe(2_800 + cfg.leaseMs);
    // A superseded leader never resumes.
    const superseded = run(leaderAt7(), entry(8, "other", 900));
    expect(superseded.state).toEqual({ kind: "follower", seen: { revision: 8, holder: "other", sinceMs: 900 } });
  });

  it("steps down when someone else's write is seen or its own renewal is refused", () => {
    expect(run(leaderAt7(), entry(8, "me", 900)).state.kind).toBe("leader"); // own echo
    const seen = run(leaderAt7(), entry(8, "other", 900));
    expect(seen.effects).toEqual([{ kind: "step-down", epoch: 7, reason: "superseded" }, { kind: "watch" }]);
    const refused = run(leaderAt7(), tick(1_000), { kind: "write-wrong-revision", nowMs: 1_020 });
    expect(refused.effects[0]).toEqual({ kind: "step-down", epoch: 7, reason: "superseded" });
    expect(refused.state.kind).toBe("follower");
  });

  it("a follower takes over only after the holder's revision stayed unchanged a whole lease on its own clock", () => {
    let s = run(initialLease().state, entry(4, "other", 100));
    expect(s.effects).toEqual([]);
    expect(s.wakeAtMs).toBe(3_100);
    s = run(s.state, entry(4, "other", 2_000)); // the same revision again restarts nothing
    expect(run(s.state, tick(3_099)).effects).toEqual([]);
    s = run(s.state, entry(5, "other", 3_000)); // a renewal restarts the count
    expect(run(s.state, tick(5_999)).effects).toEqual([]);
    s = run(s.state, tick(6_000));
    expect(s.effects).toEqual([{ kind: "update", expectedRevision: 5 }]);
    const won = run(s.state, ok(6, 6_010));
    expect(won.effects).toEqual([{ kind: "become-leader", epoch: 6 }]);
    expect(won.state).toMatchObject({ leaseUntilMs: 9_000 });
  });

  it("a deleted key is taken only after a lease, like a held one", () => {
    const s = run(initialLease().state, entry(4, null, 0));
    expect(s.effects).toEqual([]);
    expect(run(s.state, tick(3_000)).effects).toEqual([{ kind: "update", expectedRevision: 4 }]);
  });

  it("ignores stale reads older than what it has seen", () => {
    const s = run(initialLease().state, entry(5, "other", 0), entry(0, null, 10), entry(3, "x", 20));
    expect(s.state).toEqual({ kind: "follower", seen: { revision: 5, holder: "other", sinceMs: 0 } });
  });

  it("a lost race re-reads and waits another lease; an unknown outcome never counts as a win", () => {
    const taking = run(initialLease().state, entry(5, "other", 0), tick(3_000));
    const lost = run(taking.state, { kind: "write-wrong-revision", nowMs: 3_010 });
    expect(lost.effects).toEqual([{ kind: "watch" }]);
    expect(lost.state).toEqual({ kind: "follower", seen: { revision: 5, holder: "other", sinceMs: 3_010 } });
    // No answer: the stream may be down. It reads until the stream answers, and counts a whole lease from that answer.
    const failed = run(taking.state, { kind: "write-failed", nowMs: 4_000 });
    expect(failed.effects).toEqual([{ kind: "watch" }]);
    expect(failed.state).toEqual({ kind: "follower", seen: { revision: 5, holder: "other", sinceMs: 4_000 }, doubt: true });
    expect(failed.wakeAtMs).toBeUndefined();
    expect(run(failed.state, tick(9_000)).effects).toEqual([]);
    const answered = run(failed.state, entry(5, "other", 9_000));
    expect(answered.state).toEqual({ kind: "follower", seen: { revision: 5, holder: "other", sinceMs: 9_000, recounted: true } });
    expect(answered.wakeAtMs).toBe(12_000);
    // Once per revision: the next silence of the same key restarts nothing, so a flaky stream cannot put a takeover off for ever.
    const again = run(answered.state, { kind: "read-failed", nowMs: 10_000 });
    expect(again.wakeAtMs).toBe(12_000);
    const retried = run(answered.state, tick(12_000), { kind: "write-failed", nowMs: 12_500 });
    expect(retried.effects).toEqual([]);
    expect(retried.state).toEqual({ kind: "follower", seen: { revision: 5, holder: "other", sinceMs: 12_500, recounted: true } });
    expect(retried.wakeAtMs).toBe(15_500);
  });

  it("an older key is a stale read, unless it was read after a refusal and the stream went back: then its count starts now", () => {
    const at206 = run(initialLease().state, entry(206, "other", 0)).state;
    expect(run(at206, entry(204, "other", 1_000)).state).toEqual(at206);
    const back = run(at206, { kind: "entry", revision: 204, holder: "other", nowMs: 1_000, rewound: true });
    expect(back.state).toEqual({ kind: "follower", seen: { revision: 204, holder: "other", sinceMs: 1_000 } });
    expect(back.wakeAtMs).toBe(1_000 + cfg.leaseMs);
    expect(run(back.state, tick(4_000)).effects).toEqual([{ kind: "update", expectedRevision: 204 }]);
  });

  it("a follower whose probe read gets no answer takes over only a whole lease after the stream answers again (the ex-leader's window to resume)", () => {
    const watching = run(initialLease().state, entry(5, "other", 0));
    expect(watching.wakeAtMs).toBe(3_000);
    const silent = run(watching.state, { kind: "read-failed", nowMs: 1_500 });
    expect(silent.state).toEqual({ kind: "follower", seen: { revision: 5, holder: "other", sinceMs: 0 }, doubt: true });
    expect(silent.wakeAtMs).toBeUndefined();
    expect(run(silent.state, tick(3_000)).effects).toEqual([]);
    // Back at 4 000 with the key unchanged: the count starts there, not at 0.
    const back = run(silent.state, entry(5, "other", 4_000));
    expect(back.state).toEqual({ kind: "follower", seen: { revision: 5, holder: "other", sinceMs: 4_000, recounted: true } });
    expect(back.wakeAtMs).toBe(7_000);
    expect(run(back.state, tick(6_999)).effects).toEqual([]);
    expect(run(back.state, tick(7_000)).effects).toEqual([{ kind: "update", expectedRevision: 5 }]);
    // A newer revision while in doubt is news like any other: its count starts when it is seen.
    expect(run(silent.state, entry(6, "other", 4_000)).state).toEqual({ kind: "follower", seen: { revision: 6, holder: "other", sinceMs: 4_000 } });
    // A leader ignores a failed read: its renewals are what count.
    expect(run(leaderAt7(), { kind: "read-failed", nowMs: 900 }).state).toEqual(leaderAt7());
  });

  it("a win that someone else's write already follows is no win: it follows the newer holder (two takeovers from one revision both acknowledged)", () => {
    const taking = run(initialLease().state, entry(5, "other", 0), tick(3_000));
    // The read-back (or the watch) shows a rival's write after ours, before our answer is fed.
    const beaten = run(taking.state, entry(7, "rival", 3_005), ok(6, 3_010));
    expect(beaten.effects).toEqual([]);
    expect(beaten.state).toEqual({ kind: "follower", seen: { revision: 7, holder: "rival", sinceMs: 3_005 } });
    // Our own write read back is a confirmation, not a rival.
    const confirmed = run(taking.state, entry(6, "me", 3_005), ok(6, 3_010));
    expect(confirmed.effects).toEqual([{ kind: "become-leader", epoch: 6 }]);
  });

  it("a win answered too late to act on renews before leading, on the renewal's revision", () => {
    const s = run(initialLease().state, entry(0, null, 0), ok(7, 2_600));
    expect(s.effects).toEqual([{ kind: "update", expectedRevision: 7 }]);
    expect(isLeaderAt(cfg, s.state, 2_600)).toBe(false);
    expect(run(s.state, ok(8, 2_700)).effects).toEqual([{ kind: "become-leader", epoch: 8 }]);
  });
});
