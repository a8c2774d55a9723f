import { Code, ManualClock, isWardenError } from "@warden/common";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { Completion } from "./request-tracker.js";
import type { StopCommand, StopOutcome } from "./stop-command.js";
import { createWatchdogCore, type WatchdogCore } from "./watchdog-core.js";
import { createWatchdogService, type SettleReport } from "./watchdog-service.js";
import { checkSnapshotInvariants, groupConflicts } from "./watchdog-snapshot.js";

// Model-based tests of the core against a small reference model, and
// scheduler-driven interleavings of the async facade. The properties are the
// issue's: request conservation, no resurrection, no phantom, no amnesia,
// single-flight, evicted == really stopped, groups exclusive per node after
// every admission.

const nodes = ["n1", "n2"] as const;
const models = ["a", "b", "c", "d"] as const;
const addressesOf: Record<string, readonly string[]> = { n1: ["x0", "x1", "x2"], n2: ["y0", "y1", "y2"] };
const allAddresses = [...(addressesOf.n1 ?? []), ...(addressesOf.n2 ?? [])];
const groups = { a: ["g"], b: ["g"], c: ["h"] };

type MState = "reserved" | "loading" | "ready" | "freed";
interface MInst {
  readonly inc: string;
  readonly node: string;
  readonly model: string;
  address: string | undefined;
  state: MState;
  pending: boolean;
  exited: boolean;
  /** Order of taking the address: only a later taker replaces (settle row 1, seed 14857). */
  addressSeq: number;
}
interface Model {
  insts: Map<string, MInst>;
  nextAddressSeq: number;
  /** Every request ever begun: its address and whether the model thinks it is open. */
  reqs: { address: string; open: boolean }[];
  nextInc: number;
  limit: number;
}
interface Real {
  clock: ManualClock;
  core: WatchdogCore;
  holds: Map<string, boolean>;
  completions: Completion[];
}

function newWorld(limit: number): { model: Model; real: Real } {
  const clock = new ManualClock(0);
  const holds = new Map<string, boolean>();
  const core = createWatchdogCore({
    clock,
    loader: { hasModelAtAddress: (_m, _a, inc) => holds.get(inc) ?? true },
    policy: { limitPerNode: limit, idleCheck: true, idleTimeoutMs: 50, busyCheck: true, busyTimeoutMs: 200, modelGroups: groups },
  });
  return { model: { insts: new Map(), nextAddressSeq: 1, reqs: [], nextInc: 0, limit }, real: { clock, core, holds, completions: [] } };
}

function pick<T>(list: readonly T[], k: number): T | undefined {
  return list.length === 0 ? undefined : list[k % list.length];
}

function clearAddress(m: Model, address: string): void {
  for (const r of m.reqs) if (r.address === address) r.open = false;
}

function othersAt(m: Model, inc: string, address: string): MInst[] {
  return [...m.insts.values()].filter((i) => i.inc !== inc && i.address === address && i.state !== "reserved");
}

/** Marks selected victims pending in the model, checking each was selectable (single-flight, no loading victims on policy paths). */
function applyStops(m: Model, stops: readonly StopCommand[], policyPath: boolean): void {
  for (const s of stops) {
    const i = m.insts.get(s.incarnation);
    expect(i, `stop for unknown ${s.incarnation}`).toBeDefined();
    if (i === undefined) continue;
    expect(i.pending, `second stop for ${s.incarnation}`).toBe(false);
    expect(i.state).not.toBe("reserved");
    if (policyPath) expect(i.state).toBe("ready");
    expect(s.detachedFrom).toBe(i.state);
    expect(s.address).toBe(i.address);
    i.pending = true;
  }
}

/** Checks real against model after every command. */
function checkAll(m: Model, r: Real): void {
  const snap = r.core.snapshot();
  expect(checkSnapshotInvariants(snap)).toEqual([]);
  // No amnesia and no phantom: exactly the model's instances, in the model's states.
  expect(snap.instances.length).toBe(m.insts.size);
  for (const i of m.insts.values()) {
    const v = r.core.instance(i.inc);
    expect(v, `amnesia: ${i.inc}`).toBeDefined();
    expect(v?.state).toBe(i.state);
    expect(v?.pendingEviction !== undefined).toBe(i.pending);
    expect(v?.address).toBe(i.address);
  }
  expect(snap.loadedCount).toBe([...m.insts.values()].filter((i) => i.state !== "reserved" && !i.pending).length);
  // Request conservation: in-flight equals begins minus ends minus closures, per address.
  for (const a of allAddresses) {
    const open = m.reqs.filter((q) => q.address === a && q.open).length;
    expect(r.core.inFlight(a), `in-flight on ${a}`).toBe(open);
  }
}

type Cmd = fc.Command<Model, Real>;

class Admit implements Cmd {
  constructor(
    readonly node: string,
    readonly model: string,
  ) {}
  check(): boolean {
    return true;
  }
  run(m: Model, r: Real): void {
    const inc = `i${m.nextInc++}`;
    const d = r.core.admit({ nodeId: this.node, model: this.model, incarnation: inc });
    if (d.t === "admitted") {
      m.insts.set(inc, { inc, node: this.node, model: this.model, address: undefined, state: "reserved", pending: false, exited: false, addressSeq: 0 });
      // Groups exclusive per node after every admission.
      const conflicts = groupConflicts(r.core.snapshot(), this.node).filter(([x, y]) => x === inc || y === inc);
      expect(conflicts).toEqual([]);
      if (m.limit > 0 && d.limitExceeded === undefined) expect(d.occupancy.total).toBeLessThanOrEqual(m.limit);
    } else {
      // A wait that neither evicts nor needs more would livelock the loader.
      expect(d.stops.length > 0 || d.needMore).toBe(true);
      applyStops(m, d.stops, true);
    }
    checkAll(m, r);
  }
  toString(): string {
    return `admit(${this.node},${this.model})`;
  }
}

class Spawn implements Cmd {
  constructor(
    readonly k: number,
    readonly addr: number,
  ) {}
  check(m: Readonly<Model>): boolean {
    return [...m.insts.values()].some((i) => i.state === "reserved");
  }
  run(m: Model, r: Real): void {
    const i = pick([...m.insts.values()].filter((x) => x.state === "reserved"), this.k);
    if (i === undefined) return;
    const address = pick(addressesOf[i.node] ?? [], this.addr) ?? "none";
    const taken = othersAt(m, i.inc, address).some((o) => !o.pending);
    let err: unknown;
    try {
      r.core.registerLoading({ nodeId: i.node, model: i.model, incarnation: i.inc, address, gpu: 0 });
    } catch (e) {
      err = e;
    }
    if (taken) {
      expect(isWardenError(err, Code.FailedPrecondition)).toBe(true);
    } else {
      expect(err).toBeUndefined();
      // A new incarnation on a pending predecessor's address starts with fresh request state (seed 18428).
      if (othersAt(m, i.inc, address).length > 0) clearAddress(m, address);
      i.address = address;
      i.addressSeq = m.nextAddressSeq++;
      i.state = "loading";
    }
    checkAll(m, r);
  }
  toString(): string {
    return `spawn(${this.k},${this.addr})`;
  }
}

class Ready implements Cmd {
  constructor(readonly k: number) {}
  check(m: Readonly<Model>): boolean {
    return [...m.insts.values()].some((i) => i.state === "loading");
  }
  run(m: Model, r: Real): void {
    const i = pick([...m.insts.values()].filter((x) => x.state === "loading"), this.k);
    if (i === undefined) return;
    r.core.markReady(i.inc);
    // A pending instance detached while loading is registered ready if its stop fails (the load went on).
    i.state = "ready";
    checkAll(m, r);
  }
  toString(): string {
    return `ready(${this.k})`;
  }
}

class Remove implements Cmd {
  constructor(readonly k: number) {}
  check(m: Readonly<Model>): boolean {
    return m.insts.size > 0;
  }
  run(m: Model, r: Real): void {
    const i = pick([...m.insts.values()], this.k);
    if (i === undefined) return;
    const res = r.core.remove(i.inc);
    if (i.pending) {
      expect(res.t).toBe("pending");
      i.exited = true;
    } else {
      expect(res.t).toBe(i.state === "reserved" ? "released" : "removed");
      m.insts.delete(i.inc);
      if (i.address !== undefined && othersAt(m, i.inc, i.address).length === 0) clearAddress(m, i.address);
    }
    checkAll(m, r);
  }
  toString(): string {
    return `remove(${this.k})`;
  }
}

class Begin implements Cmd {
  constructor(readonly addr: number) {}
  check(): boolean {
    return true;
  }
  run(m: Model, r: Real): void {
    const address = pick(allAddresses, this.addr) ?? "x0";
    r.completions.push(r.core.trackRequest(address));
    m.reqs.push({ address, open: true });
    checkAll(m, r);
  }
  toString(): string {
    return `begin(${this.addr})`;
  }
}

class End implements Cmd {
  constructor(readonly k: number) {}
  check(m: Readonly<Model>): boolean {
    return m.reqs.length > 0;
  }
  run(m: Model, r: Real): void {
    const idx = this.k % m.reqs.length;
    r.completions[idx]?.();
    const q = m.reqs[idx];
    if (q !== undefined) q.open = false;
    checkAll(m, r);
  }
  toString(): string {
    return `end(${this.k})`;
  }
}

class Tick implements Cmd {
  constructor(readonly advanceMs: number) {}
  check(): boolean {
    return true;
  }
  run(m: Model, r: Real): void {
    r.clock.advance(this.advanceMs);
    const d = r.core.tick();
    applyStops(m, d.stops, true);
    for (const a of d.untrackedAddresses) {
      expect([...m.insts.values()].some((i) => i.address === a && i.state !== "reserved")).toBe(false);
      clearAddress(m, a);
    }
    checkAll(m, r);
  }
  toString(): string {
    return `tick(+${this.advanceMs})`;
  }
}

class Enforce implements Cmd {
  constructor(
    readonly node: string,
    readonly groupsFor: string | undefined,
  ) {}
  check(): boolean {
    return true;
  }
  run(m: Model, r: Real): void {
    const d = this.groupsFor === undefined ? r.core.enforceLimit(this.node) : r.core.enforceGroups(this.node, this.groupsFor);
    applyStops(m, d.stops, true);
    checkAll(m, r);
  }
  toString(): string {
    return this.groupsFor === undefined ? `enforceLimit(${this.node})` : `enforceGroups(${this.node},${this.groupsFor})`;
  }
}

class Explicit implements Cmd {
  constructor(
    readonly k: number,
    readonly force: boolean,
  ) {}
  check(m: Readonly<Model>): boolean {
    return m.insts.size > 0;
  }
  run(m: Model, r: Real): void {
    const i = pick([...m.insts.values()], this.k);
    if (i === undefined) return;
    const sel = r.core.selectExplicit(i.inc, { reason: "admin", force: this.force });
    if (i.state === "reserved") expect(sel.t).toBe("reserved");
    else if (i.pending) expect(sel.t).toBe("joined");
    else {
      expect(sel.t).toBe("stop");
      if (sel.t === "stop") applyStops(m, [sel.command], false);
    }
    checkAll(m, r);
  }
  toString(): string {
    return `explicit(${this.k},${this.force})`;
  }
}

class Settle implements Cmd {
  constructor(
    readonly k: number,
    readonly outcome: StopOutcome,
    readonly holds: boolean,
  ) {}
  check(m: Readonly<Model>): boolean {
    return [...m.insts.values()].some((i) => i.pending);
  }
  run(m: Model, r: Real): void {
    const i = pick([...m.insts.values()].filter((x) => x.pending), this.k);
    if (i === undefined || i.address === undefined) return;
    r.holds.set(i.inc, this.holds);
    const ok = this.outcome.t !== "failed";
    const replaced = othersAt(m, i.inc, i.address).some((o) => o.addressSeq > i.addressSeq);
    const expected = replaced ? 1 : ok || i.exited ? 2 : this.holds ? 3 : 4;
    const res = r.core.settle(i.inc, this.outcome);
    expect(res.row).toBe(expected);
    switch (expected) {
      case 1:
        m.insts.delete(i.inc);
        break;
      case 2:
      case 4:
        m.insts.delete(i.inc);
        clearAddress(m, i.address);
        break;
      case 3:
        i.pending = false;
        if (this.outcome.t === "failed" && this.outcome.freed) i.state = "freed";
        break;
    }
    // A second settle of the same stop changes nothing.
    expect(r.core.settle(i.inc, this.outcome).row).toBe(0);
    checkAll(m, r);
  }
  toString(): string {
    return `settle(${this.k},${this.outcome.t}${this.outcome.t === "failed" && this.outcome.freed ? "+freed" : ""},holds=${this.holds})`;
  }
}

class Policy implements Cmd {
  constructor(
    readonly limit: number,
    readonly force: boolean,
    readonly pinA: boolean,
  ) {}
  check(): boolean {
    return true;
  }
  run(m: Model, r: Real): void {
    r.core.updatePolicy({ limitPerNode: this.limit, forceEvictionWhenBusy: this.force, pinnedModels: this.pinA ? ["a"] : [], memoryReclaimer: true });
    m.limit = this.limit;
    checkAll(m, r);
  }
  toString(): string {
    return `policy(limit=${this.limit},force=${this.force},pinA=${this.pinA})`;
  }
}

class Occupancy implements Cmd {
  constructor(
    readonly node: string,
    readonly count: number,
  ) {}
  check(): boolean {
    return true;
  }
  run(m: Model, r: Real): void {
    // Leftovers and unconfirmed instances (journal-known, node not reported) alternate: both count, neither is selectable.
    const entries = Array.from({ length: this.count }, (_, j) => ({ kind: j % 2 === 0 ? ("leftover" as const) : ("unconfirmed" as const), key: `lo${j}`, model: "z", groups: j <= 1 ? ["g"] : [], sizeBytes: 1 }));
    r.core.setNodeOccupancy(this.node, entries);
    checkAll(m, r);
  }
  toString(): string {
    return `occupancy(${this.node},${this.count})`;
  }
}

class Memory implements Cmd {
  constructor(
    readonly node: string,
    readonly usedPct: number,
  ) {}
  check(): boolean {
    return true;
  }
  run(m: Model, r: Real): void {
    r.core.reportMemory(this.node, { gpus: [{ index: 0, totalBytes: 100, usedBytes: this.usedPct }] });
    checkAll(m, r);
  }
  toString(): string {
    return `memory(${this.node},${this.usedPct}%)`;
  }
}

const outcomeArb: fc.Arbitrary<StopOutcome> = fc.oneof(
  fc.constant<StopOutcome>({ t: "stopped" }),
  fc.constant<StopOutcome>({ t: "alreadyGone" }),
  fc.boolean().map((freed): StopOutcome => ({ t: "failed", message: "deadline exceeded", freed })),
);
const nodeArb = fc.constantFrom(...nodes);
const modelArb = fc.constantFrom(...models);
const k = fc.nat(50);

const commandArbs = [
  fc.tuple(nodeArb, modelArb).map(([n, mo]) => new Admit(n, mo)),
  fc.tuple(k, fc.nat(5)).map(([a, b]) => new Spawn(a, b)),
  k.map((x) => new Ready(x)),
  k.map((x) => new Remove(x)),
  fc.nat(5).map((x) => new Begin(x)),
  k.map((x) => new End(x)),
  fc.integer({ min: 0, max: 300 }).map((x) => new Tick(x)),
  fc.tuple(nodeArb, fc.option(modelArb, { nil: undefined })).map(([n, mo]) => new Enforce(n, mo)),
  fc.tuple(k, fc.boolean()).map(([a, b]) => new Explicit(a, b)),
  fc.tuple(k, outcomeArb, fc.boolean()).map(([a, o, h]) => new Settle(a, o, h)),
  fc.tuple(fc.integer({ min: 0, max: 3 }), fc.boolean(), fc.boolean()).map(([l, f, p]) => new Policy(l, f, p)),
  fc.tuple(nodeArb, fc.integer({ min: 0, max: 2 })).map(([n, c]) => new Occupancy(n, c)),
  fc.tuple(nodeArb, fc.integer({ min: 0, max: 100 })).map(([n, u]) => new Memory(n, u)),
];

describe("watchdog core against a reference model (fc.commands)", () => {
  it("keeps conservation, no resurrection, no phantom, no amnesia, single-flight, evicted == stopped and group exclusivity", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 3 }), fc.commands(commandArbs, { maxCommands: 80, size: "max" }), (limit, cmds) => {
        fc.modelRun(() => newWorld(limit), cmds);
      }),
      { numRuns: 700 },
    );
  });
});

describe("async facade under scheduled interleavings (fc.scheduler)", () => {
  type Op =
    | { t: "begin"; addr: number }
    | { t: "end"; k: number }
    | { t: "tick"; ms: number }
    | { t: "admit"; node: string; model: string }
    | { t: "replace"; k: number }
    | { t: "explicit"; k: number; force: boolean }
    | { t: "ready"; k: number };
  const opArb: fc.Arbitrary<Op> = fc.oneof(
    fc.nat(5).map((addr): Op => ({ t: "begin", addr })),
    k.map((x): Op => ({ t: "end", k: x })),
    fc.integer({ min: 0, max: 120 }).map((ms): Op => ({ t: "tick", ms })),
    fc.tuple(nodeArb, modelArb).map(([node, model]): Op => ({ t: "admit", node, model })),
    k.map((x): Op => ({ t: "replace", k: x })),
    fc.tuple(k, fc.boolean()).map(([x, force]): Op => ({ t: "explicit", k: x, force })),
    k.map((x): Op => ({ t: "ready", k: x })),
  );

  it("settles interleaved with begin/end/tick/replacement/admission keep every invariant", async () => {
    const rowsSeen = new Set<number>();
    await fc.assert(
      fc.asyncProperty(fc.scheduler(), fc.array(opArb, { minLength: 5, maxLength: 40, size: "max" }), fc.array(outcomeArb, { minLength: 1, maxLength: 8 }), async (s, ops, outcomes) => {
        const clock = new ManualClock(0);
        const dropped = new Set<string>();
        const core = createWatchdogCore({
          clock,
          loader: { hasModelAtAddress: (_m, _a, inc) => !dropped.has(inc) },
          policy: { limitPerNode: 2, idleCheck: true, idleTimeoutMs: 30, busyCheck: true, busyTimeoutMs: 100, forceEvictionWhenBusy: true, modelGroups: groups },
        });
        const active = new Map<string, number>();
        let calls = 0;
        const settles: SettleReport[] = [];
        const svc = createWatchdogService({
          core,
          onSettled: (r) => settles.push(r),
          stopPort: {
            stop: (cmd) => {
              const n = (active.get(cmd.incarnation) ?? 0) + 1;
              active.set(cmd.incarnation, n);
              // Single-flight: never two stops of one instance at once.
              expect(n).toBe(1);
              const outcome = outcomes[calls++ % outcomes.length] ?? { t: "stopped" };
              if (outcome.t === "failed" && calls % 3 === 0) dropped.add(cmd.incarnation);
              return s.schedule(Promise.resolve(outcome), `stop ${cmd.incarnation}`).then((o) => {
                active.set(cmd.incarnation, 0);
                return o;
              });
            },
          },
        });
        const completions: Completion[] = [];
        const seen = new Set<string>();
        const removedByTest = new Set<string>();
        let nextInc = 0;
        const live = (): string[] => core.snapshot().instances.map((i) => i.incarnation);
        const pending: Promise<unknown>[] = [];
        const run = async (op: Op): Promise<void> => {
          // Each operation starts when the scheduler picks it, so ops, stop replies and settles interleave.
          await s.schedule(Promise.resolve(), op.t);
          switch (op.t) {
            case "begin":
              completions.push(core.trackRequest(allAddresses[op.addr % allAddresses.length] ?? "x0"));
              break;
            case "end":
              if (completions.length > 0) completions[op.k % completions.length]?.();
              break;
            case "tick":
              clock.advance(op.ms);
              svc.tick();
              break;
            case "admit": {
              const inc = `s${nextInc++}`;
              const res = await svc.admit({ nodeId: op.node, model: op.model, incarnation: inc });
              if (res.t === "admitted") {
                seen.add(inc);
                // Spawn at once on a free address of the node, or give the reservation up.
                const free = (addressesOf[op.node] ?? []).find((a) => core.instanceAt(a) === undefined);
                if (free === undefined) {
                  core.releaseReservation(inc);
                  removedByTest.add(inc);
                }
                else core.registerLoading({ nodeId: op.node, model: op.model, incarnation: inc, address: free, gpu: 0 });
              }
              break;
            }
            case "replace": {
              // A process exit followed by a new start on the same address (port reuse).
              const inst = core.snapshot().instances.filter((i) => i.address !== undefined)[op.k % Math.max(1, live().length)];
              if (inst?.address === undefined) break;
              if (core.remove(inst.incarnation).t === "removed") removedByTest.add(inst.incarnation);
              if (core.instanceAt(inst.address) === undefined) {
                const inc = `r${nextInc++}`;
                seen.add(inc);
                core.registerReady({ nodeId: inst.nodeId, model: inst.model, incarnation: inc, address: inst.address });
              }
              break;
            }
            case "explicit": {
              const inc = live()[op.k % Math.max(1, live().length)];
              if (inc !== undefined) await svc.stop(inc, { reason: "admin", force: op.force });
              break;
            }
            case "ready": {
              const inc = live()[op.k % Math.max(1, live().length)];
              if (inc !== undefined && core.instance(inc)?.state === "loading") core.markReady(inc);
              break;
            }
          }
          expect(checkSnapshotInvariants(core.snapshot())).toEqual([]);
        };
        for (const op of ops) pending.push(run(op));
        await s.waitIdle();
        await Promise.all(pending);
        await svc.whenSettled();
        const snap = core.snapshot();
        expect(checkSnapshotInvariants(snap)).toEqual([]);
        // Nothing left pending once every stop answered; every settle is one of the four rows.
        expect(snap.instances.filter((i) => i.pendingEviction !== undefined)).toEqual([]);
        for (const r of settles) expect([1, 2, 3, 4]).toContain(r.result.row);
        // No amnesia: every instance ever registered is still there, or a settle/removal accounted for it.
        const settled = new Set(settles.filter((r) => r.result.row !== 3).map((r) => r.command.incarnation));
        for (const inc of seen) {
          const accounted = core.instance(inc) !== undefined || settled.has(inc) || removedByTest.has(inc);
          expect(accounted, `amnesia: ${inc}`).toBe(true);
        }
        // evicted == really stopped: row 2 only from stopped/alreadyGone (or an exited process).
        for (const r of settles) if (r.result.row === 2 && r.outcome.t === "failed") expect(r.result.instance.pendingEviction?.exited).toBe(true);
        for (const r of settles) rowsSeen.add(r.result.row);
        // Conservation and no resurrection: once every completion ran, nothing is in flight anywhere,
        // and completions of requests closed by a settle did not touch a replacement's state.
        for (const c of completions) c();
        for (const a of core.snapshot().addresses) expect(a.inFlight).toBe(0);
        expect(checkSnapshotInvariants(core.snapshot())).toEqual([]);
      }),
      { numRuns: 400 },
    );
    // The interleavings reached every row of the settle table.
    expect([...rowsSeen].sort()).toEqual([1, 2, 3, 4]);
  });
});
