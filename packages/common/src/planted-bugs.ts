/**
 * Planted bugs ("test the tester"): deliberate defects in
 * the decision code that the seeded simulation must catch. Each name is a
 * minimal branch at the exact place where the correct behaviour lives; the
 * decision code asks {@link isPlanted} there.
 *
 * Off by default and unreachable from production: the only way to switch one
 * on is `plantBugs`, exported from the test-only entry
 * `@warden/common/testing/planted-bugs` (never from `@warden/common`), which
 * nothing under services/ or packages/ may import (eslint
 * `no-restricted-imports`, and packages/common/src/planted-bugs.test.ts scans
 * the tree). Config parsing, env, CLI and gRPC never see these names.
 *
 * Cost when off: one module-variable load and compare per check; the checks
 * sit off the hot paths anyway (settle, admission, a completion called twice).
 */
export const plantedBugNames = [
  /** settle: a failed stop is treated as stopped (row 2): the live process leaves all accounting. */
  "forget-on-failed-stop",
  /** settle: a failed stop registers the identity again without asking `hasModelAtAddress`. */
  "register-again-without-asking-loader",
  /** stop sequence: a remote stop's failure is reported while the local half is still held (so it is registered again). */
  "report-remote-failure-before-drop",
  /** settle: a failed stop restores the request state snapshot taken at detach (completions during the stop come back). */
  "restore-request-snapshot",
  /** facade: a failed stop counts as evicted, and a wait whose stops all "evicted" is admitted without asking the core again. */
  "count-failed-stops-as-evicted",
  /** tick: idle and busy checks look at pending addresses too. */
  "idle-busy-see-pending",
  /** admission: pending evictions do not count as occupied. */
  "admission-ignores-pending",
  /** request tracker: a completion called twice decrements in-flight again. */
  "inflight-below-zero",
  /** routing: a call may be routed to an instance pending eviction. */
  "route-to-stopping",
  /** outbox: an event is queued for publishing before its journal append is durable. */
  "publish-before-append",
  /** settle: a stop's settle acts on the address without checking that its incarnation still holds it (row 1 skipped). */
  "stop-without-incarnation-check",
  /** restart: open stop intents of nodes that have not registered yet are dropped instead of restored as leftovers. */
  "forget-intents-of-unregistered-nodes",
  /** adoption: a confirmed stop is not remembered, so a stale inventory adopts the incarnation again. */
  "adopt-confirmed-gone",
  /** replica reconciler: scale-down's floor is one replica instead of max(min, 1), so idle replicas are stopped below `min`. */
  "scale-down-below-min",
  /** agent leader fence: a command from an older leader epoch is accepted (and the fence not raised) instead of refused. */
  "agent-ignores-leader-epoch",
  /** journal epoch fence: a writer sends without holding the lease, and re-chains behind a newer epoch's record instead of stopping. */
  "exleader-append-accepted",
  /** agent fence: FreeBackend (the stop sequence's Free) is applied without the agent's leader-epoch check — a Free sent past the fence. */
  "free-past-fence",
  /** takeover: the recovery window is the fixed timer alone, and the journal's unconfirmed instances do not count for groups, limits or memory. */
  "fixed-recovery-window",
  /** lease takeover: no claim key and no check of a newer write, so two members can win takeovers from one revision. */
  "two-leaders-one-epoch",
  /** delta heartbeats: a delta whose base the coordinator does not hold is applied onto an empty inventory, its digest unchecked, instead of asking for a full one. */
  "delta-against-wrong-base",
  /** agent orphan scan: the model in a process's mark is dropped, so an orphan killed-before-record counts for no exclusive group. */
  "orphan-without-model",
  /** admission queue: waiting calls are served lowest class first (sheddable before critical). */
  "admission-lowest-class-first",
  /** HA audit publishing: publishes carry no condition on the stream's last message, so a resumed ex-leader's delayed publish lands after its successor's events. */
  "audit-publish-unfenced",
  /** routing: an instance on an unreachable node is routed whatever the coordinator's health probe of its backend said. */
  "route-probe-failed",
  /** admission queue: a principal keeps its turn while it has calls waiting (served until empty, not round robin). */
  "admission-principal-keeps-turn",
  /** placement: a node registered without its first inventory yet is placed on like any other, beside what it has not reported. */
  "place-before-inventory",
  /** lease: an ex-leader whose lease ran out retakes whatever key it sees at once, not only its own (so it takes a successor's key inside the successor's lease). */
  "resume-any-key",
  /** prefix routing: the longest matching prefix wins whatever its calls in flight (the balance margin ignored). */
  "prefix-ignores-margin",
  /** unchanged heartbeats: a node counts as settled while a ready instance it holds is missing from its inventory (a pending missing count), so empty deltas skip the second count. */
  "unchanged-ignores-missing",
] as const;

export type PlantedBug = (typeof plantedBugNames)[number];

/** Undefined while nothing is planted: the common case costs one compare. */
let planted: ReadonlySet<PlantedBug> | undefined;

/** True when `bug` is planted. Always false outside the simulation's tests. */
export function isPlanted(bug: PlantedBug): boolean {
  return planted !== undefined && planted.has(bug);
}

/**
 * Test-only: plants `bugs` (replacing any planted before) and returns the
 * undo. Re-exported only from `@warden/common/testing/planted-bugs`.
 * Throws on an unknown name, so a typo cannot silently test nothing.
 */
export function plantBugs(bugs: readonly PlantedBug[]): () => void {
  for (const b of bugs) if (!(plantedBugNames as readonly string[]).includes(b)) throw new RangeError(`unknown planted bug "${b}"`);
  const before = planted;
  planted = bugs.length === 0 ? undefined : Object.freeze(new Set(bugs));
  return () => {
    planted = before;
  };
}

/** The bugs planted now (tests, diagnostics). */
export function plantedBugs(): PlantedBug[] {
  return planted === undefined ? [] : [...planted];
}
