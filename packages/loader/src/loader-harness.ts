import { ManualClock, WardenError, seededRng, sleep } from "@warden/common";
import type { PolicyPatch } from "@warden/watchdog";
import { FakeAgent } from "./fake-agent.js";
import { FakeConnector, FakeDirectory, FakeEvents, FakeFrees, FakeInventory, FakeJournal, FakePlacement, type FakeBackend } from "./fake-ports.js";
import type { CooldownPolicy } from "./load-cooldown.js";
import { Loader, type StopTimings } from "./loader.js";
import { modelSpec, type ModelSpec } from "./model-spec.js";
import { flush } from "./test-helpers.js";

export interface HarnessOptions {
  readonly models?: readonly ModelSpec[];
  readonly policy?: PolicyPatch;
  readonly stop?: Partial<StopTimings>;
  readonly enforcement?: { readonly maxAttempts: number; readonly intervalMs: number };
  readonly loadWaitMs?: number;
  readonly cooldown?: CooldownPolicy;
  readonly stuckAfterMs?: number;
  readonly maxWaitingPerModel?: number;
  readonly replicaPass?: "changed" | "every";
  /** New loads wait for it (a restarted coordinator's recovery window). */
  readonly admissionGate?: Promise<void>;
}

/** Models m1…m4 on backend "sim", no groups, 10 min load deadline. */
export function defaultModels(): ModelSpec[] {
  return ["m1", "m2", "m3", "m4"].map((id) => modelSpec({ id, backend: "sim" }));
}

/**
 * A loader wired to fakes: node `n1` is the embedded (local) agent, `n2` a
 * registered (remote) agent; placement defaults to n1. Leftover backoff is
 * 1 s doubling to 8 s without jitter, so retry times are exact.
 */
export function createHarness(o: HarnessOptions = {}) {
  const clock = new ManualClock();
  const log: string[] = [];
  const frees = new FakeFrees(log);
  const n1 = new FakeAgent("n1", log, frees);
  const n2 = new FakeAgent("n2", log, frees);
  const directory = new FakeDirectory();
  directory.agents.set("n1", n1);
  directory.agents.set("n2", n2);
  directory.local.add("n1");
  const connector = new FakeConnector();
  const journal = new FakeJournal(log);
  const events = new FakeEvents(log);
  const placement = new FakePlacement();
  const inventory = new FakeInventory();
  const warnings: string[] = [];
  let seq = 0;
  const loader = new Loader<FakeBackend>({
    clock,
    rng: seededRng(7),
    sleep: (ms, signal) => sleep(clock, ms, signal),
    agents: directory,
    backends: connector,
    journal,
    events,
    placement,
    inventories: inventory,
    mintIncarnation: () => `inc-${String(++seq)}`,
    models: o.models ?? defaultModels(),
    ...(o.policy === undefined ? {} : { policy: o.policy }),
    ...(o.stop === undefined ? {} : { stop: o.stop }),
    ...(o.enforcement === undefined ? {} : { enforcement: o.enforcement }),
    ...(o.loadWaitMs === undefined ? {} : { loadWaitMs: o.loadWaitMs }),
    ...(o.cooldown === undefined ? {} : { cooldown: o.cooldown }),
    ...(o.stuckAfterMs === undefined ? {} : { stuckAfterMs: o.stuckAfterMs }),
    ...(o.maxWaitingPerModel === undefined ? {} : { maxWaitingPerModel: o.maxWaitingPerModel }),
    ...(o.replicaPass === undefined ? {} : { replicaPass: o.replicaPass }),
    ...(o.admissionGate === undefined ? {} : { admissionGate: o.admissionGate }),
    leftoverBackoff: { initialMs: 1_000, factor: 2, maxMs: 8_000, jitter: 0 },
    onWarning: (msg) => {
      warnings.push(msg);
    },
  });

  /** Advances the clock by `ms`, stopping at every timer on the way and letting promise chains run after each. */
  async function run(ms: number): Promise<void> {
    const target = clock.now() + ms;
    await flush();
    for (;;) {
      const next = clock.nextTimerAtMs();
      if (next === undefined || next > target) break;
      clock.advance(Math.max(0, next - clock.now()));
      await flush();
    }
    clock.advance(target - clock.now());
    await flush();
  }

  /** Steps through timers until `pred` holds; fails if it does not within `limitMs` of clock time. */
  async function until(pred: () => boolean, limitMs = 120_000): Promise<void> {
    const end = clock.now() + limitMs;
    await flush();
    while (!pred()) {
      const next = clock.nextTimerAtMs();
      if (next === undefined || next > end) throw new Error(`condition not reached within ${String(limitMs)}ms of clock time`);
      clock.advance(Math.max(0, next - clock.now()));
      await flush();
    }
  }

  /** Records how a promise ended without letting an expected rejection go unhandled. */
  function track<T>(p: Promise<T>): { readonly done: () => boolean; readonly value: () => T; readonly error: () => WardenError } {
    let state: { t: "pending" } | { t: "ok"; v: T } | { t: "err"; e: unknown } = { t: "pending" };
    p.then(
      (v) => {
        state = { t: "ok", v };
      },
      (e: unknown) => {
        state = { t: "err", e };
      },
    );
    return {
      done: () => state.t !== "pending",
      value: () => {
        if (state.t !== "ok") throw new Error(`promise not fulfilled: ${state.t === "err" ? String(state.e) : "pending"}`);
        return state.v;
      },
      error: () => {
        if (state.t !== "err") throw new Error(`promise not rejected (${state.t})`);
        return WardenError.from(state.e);
      },
    };
  }

  const never = new AbortController().signal;
  return { clock, log, n1, n2, directory, connector, frees, journal, events, placement, inventory, warnings, loader, never, run, until, track, flush };
}

export type Harness = ReturnType<typeof createHarness>;
