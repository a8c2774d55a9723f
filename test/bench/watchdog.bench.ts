/**
 * The watchdog core against a straightforward port of LocalAI's algorithm,
 * side by side in the same run:
 * - begin/end pairs per second on one backend with 1, 100 and 10 000 requests
 *   open (steady overlapping traffic: each pair begins a request and ends the
 *   oldest, so the open count stays constant). LocalAI rescans the remaining
 *   start times on every completion to find busy-since; Warden reads the head
 *   of a start-ordered list.
 * - one admission decision with 10 000 ready instances on 1 000 nodes that
 *   must evict one victim. LocalAI builds the candidate list from the whole
 *   registry and sorts everything; Warden looks at the node only.
 * - the 500 ms tick with 20 000 ready instances on 2 000 nodes (idle and busy
 *   checks on, none due; 1 % of the addresses get a call between ticks): CPU
 *   per tick of the due-only tick against the tick that judges every address
 *   (`tickFullScan`, the reference it is checked against), same core setup.
 */
import { createWatchdogCore } from "@warden/watchdog";
import type { BenchResult } from "./bench-result.js";

const now = (): number => performance.now();

// ------------------------------------------------------------------ baseline: LocalAI's request tracking

/** A port of LocalAI's watchdog request maps (localai-semantics §1.1, §2), one mutex's worth of state without the mutex. */
class LocalAiTracker {
  private nextRequestId = 0;
  private readonly requestStarts = new Map<string, Map<number, number>>();
  private readonly inFlight = new Map<string, number>();
  private readonly busyTime = new Map<string, number>();
  private readonly idleTime = new Map<string, number>();
  private readonly lastUsed = new Map<string, number>();

  trackRequest(addr: string): () => void {
    const id = ++this.nextRequestId;
    const t = now();
    let starts = this.requestStarts.get(addr);
    if (starts === undefined) {
      starts = new Map();
      this.requestStarts.set(addr, starts);
    }
    starts.set(id, t);
    this.inFlight.set(addr, starts.size);
    if (starts.size === 1) this.busyTime.set(addr, t);
    this.lastUsed.set(addr, t);
    this.idleTime.delete(addr);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.finish(addr, id);
    };
  }

  private finish(addr: string, id: number): void {
    const starts = this.requestStarts.get(addr);
    if (starts?.has(id) !== true) return;
    starts.delete(id);
    const t = now();
    this.lastUsed.set(addr, t);
    if (starts.size > 0) {
      this.inFlight.set(addr, starts.size);
      // Busy-since = minimum start among the remaining requests: a rescan on every completion.
      let min = Number.POSITIVE_INFINITY;
      for (const s of starts.values()) if (s < min) min = s;
      this.busyTime.set(addr, min);
    } else {
      this.requestStarts.delete(addr);
      this.inFlight.delete(addr);
      this.busyTime.delete(addr);
      this.idleTime.set(addr, t);
    }
  }
}

function pairsPerSecond(track: (addr: string) => () => void, open: number, durationMs: number): number {
  // A ring of open completions: each pair begins one and ends the oldest.
  const ring: (() => void)[] = [];
  for (let i = 0; i < open; i++) ring.push(track("127.0.0.1:50051"));
  let head = 0;
  let pairs = 0;
  const start = now();
  const end = start + durationMs;
  while (now() < end) {
    for (let i = 0; i < 1000; i++) {
      const oldest = ring[head];
      ring[head] = track("127.0.0.1:50051");
      oldest?.();
      head = (head + 1) % open;
    }
    pairs += 1000;
  }
  const elapsed = now() - start;
  for (const c of ring) c();
  return pairs / (elapsed / 1000);
}

// ------------------------------------------------------------------ baseline: LocalAI's LRU enforcement

interface LocalAiRegistry {
  addressModel: Map<string, string>;
  addressNode: Map<string, string>;
  lastUsed: Map<string, number>;
  modelSizes: Map<string, number>;
  pinned: Set<string>;
  busyTime: Map<string, number>;
}

/**
 * LocalAI's EnforceLRULimit, made per node the straightforward way: build the
 * candidate list from the whole registry, sort everything, then walk it for
 * the node's victims. Returns the selected address (and puts it back, so the
 * next iteration decides the same thing — the baseline's "settle").
 */
function localAiAdmission(reg: LocalAiRegistry, nodeId: string, limitPerNode: number): string | undefined {
  let count = 0;
  for (const n of reg.addressNode.values()) if (n === nodeId) count++;
  const toEvict = count - limitPerNode + 1;
  if (toEvict <= 0) return undefined;
  const candidates: { addr: string; model: string; lastUsed: number; size: number }[] = [];
  for (const [addr, model] of reg.addressModel) {
    candidates.push({ addr, model, lastUsed: reg.lastUsed.get(addr) ?? 0, size: reg.modelSizes.get(model) ?? 0 });
  }
  candidates.sort((a, b) => a.lastUsed - b.lastUsed);
  let selected: string | undefined;
  let picked = 0;
  for (const c of candidates) {
    if (picked >= toEvict) break;
    if (reg.addressNode.get(c.addr) !== nodeId) continue;
    if (reg.pinned.has(c.model)) continue;
    if (reg.busyTime.has(c.addr)) continue;
    // detach …
    const model = reg.addressModel.get(c.addr) ?? "";
    reg.addressModel.delete(c.addr);
    selected = c.addr;
    picked++;
    // … and settle back (stop failed, loader still holds it), as ours does.
    reg.addressModel.set(c.addr, model);
  }
  return selected;
}

function microsPerCall(fn: () => void, durationMs: number): number {
  let n = 0;
  const start = now();
  const end = start + durationMs;
  while (now() < end) {
    for (let i = 0; i < 10; i++) fn();
    n += 10;
  }
  return ((now() - start) * 1000) / n;
}

// ------------------------------------------------------------------ run

export async function run(): Promise<BenchResult[]> {
  const results: BenchResult[] = [];
  const durationMs = 1000;

  for (const open of [1, 100, 10_000]) {
    const core = createWatchdogCore({ clock: { now }, loader: { hasModelAtAddress: () => true } });
    const base = new LocalAiTracker();
    const ours = (a: string): (() => void) => core.trackRequest(a);
    const theirs = (a: string): (() => void) => base.trackRequest(a);
    // Warm both up, then measure; the better of two rounds each, alternating.
    pairsPerSecond(ours, open, 200);
    pairsPerSecond(theirs, open, 200);
    let o = 0;
    let b = 0;
    for (let round = 0; round < 2; round++) {
      o = Math.max(o, pairsPerSecond(ours, open, durationMs));
      b = Math.max(b, pairsPerSecond(theirs, open, open >= 10_000 ? durationMs / 2 : durationMs));
    }
    results.push({
      name: `begin/end pairs, ${open.toLocaleString("en-US")} open`,
      baseline: "LocalAI rescan-on-completion port",
      ours: o,
      baselineValue: b,
      unit: "pairs/s",
      higherIsBetter: true,
    });
    await Promise.resolve();
  }

  // 10 000 ready instances on 1 000 nodes, 10 per node, limit 10: one victim per decision.
  const nodes = 1_000;
  const perNode = 10;
  let t = 0;
  const clock = { now: () => t };
  const core = createWatchdogCore({ clock, loader: { hasModelAtAddress: () => true }, policy: { limitPerNode: perNode } });
  const reg: LocalAiRegistry = {
    addressModel: new Map(),
    addressNode: new Map(),
    lastUsed: new Map(),
    modelSizes: new Map(),
    pinned: new Set(),
    busyTime: new Map(),
  };
  for (let n = 0; n < nodes; n++) {
    for (let i = 0; i < perNode; i++) {
      t++;
      const address = `10.0.${n}.1:${5000 + i}`;
      const model = `m-${n}-${i}`;
      core.registerReady({ nodeId: `node-${n}`, model, incarnation: `inc-${n}-${i}`, address, sizeBytes: 1 << 30 });
      reg.addressModel.set(address, model);
      reg.addressNode.set(address, `node-${n}`);
      reg.lastUsed.set(address, t);
      reg.modelSizes.set(model, 1 << 30);
    }
  }
  let k = 0;
  const oursDecision = (): void => {
    const nodeId = `node-${k++ % nodes}`;
    const d = core.admit({ nodeId, model: "incoming", incarnation: "incoming-1" });
    if (d.t !== "wait" || d.stops.length !== 1) throw new Error(`unexpected admission ${d.t}`);
    // Put the victim back (stop failed, loader holds it: settle row 3) so every decision is the same work.
    for (const s of d.stops) core.settle(s.incarnation, { t: "failed", message: "bench", freed: false });
  };
  let j = 0;
  const baselineDecision = (): void => {
    if (localAiAdmission(reg, `node-${j++ % nodes}`, perNode) === undefined) throw new Error("baseline selected nothing");
  };
  microsPerCall(oursDecision, 200);
  microsPerCall(baselineDecision, 200);
  const o = microsPerCall(oursDecision, durationMs);
  const b = microsPerCall(baselineDecision, durationMs);
  results.push({
    name: "admission decision, 10,000 instances on 1,000 nodes",
    baseline: "LocalAI build-and-sort-everything port",
    ours: o,
    baselineValue: b,
    unit: "µs/decision",
    higherIsBetter: false,
  });
  results.push(tickRow(durationMs));
  return results;
}

/** CPU (user + system, µs) per tick over `durationMs` of ticks, 500 simulated ms apart, with 1 % of the addresses called between ticks. */
function cpuPerTick(full: boolean, durationMs: number): number {
  const instances = 20_000;
  let t = 0;
  const clock = { now: () => t };
  const core = createWatchdogCore({ clock, loader: { hasModelAtAddress: () => true }, policy: { idleCheck: true, busyCheck: true } });
  const addresses: string[] = [];
  for (let i = 0; i < instances; i++) {
    const address = `10.${String(i % 2000 >> 8)}.${String(i % 256)}.1:${String(5000 + Math.floor(i / 2000))}`;
    addresses.push(address);
    core.registerReady({ nodeId: `node-${String(i % 2000)}`, model: `m-${String(i)}`, incarnation: `inc-${String(i)}`, address, sizeBytes: 1 << 30 });
  }
  const tick = (): void => {
    const d = full ? core.tickFullScan() : core.tick();
    if (d.stops.length > 0) throw new Error("nothing is due in this benchmark");
  };
  tick();
  let k = 0;
  let ticks = 0;
  let cpuUs = 0;
  const end = now() + durationMs;
  while (now() < end) {
    t += 500;
    for (let i = 0; i < instances / 100; i++) core.trackRequest(addresses[k++ % instances] ?? "")();
    const before = process.cpuUsage();
    tick();
    const used = process.cpuUsage(before);
    cpuUs += used.user + used.system;
    ticks++;
  }
  return cpuUs / ticks;
}

function tickRow(durationMs: number): BenchResult {
  // Warm both up, then the better of two rounds each, alternating.
  cpuPerTick(false, 200);
  cpuPerTick(true, 200);
  let o = Infinity;
  let b = Infinity;
  for (let round = 0; round < 2; round++) {
    o = Math.min(o, cpuPerTick(false, durationMs));
    b = Math.min(b, cpuPerTick(true, durationMs));
  }
  return {
    name: "watchdog tick, 20,000 instances, none due, 1 % called between ticks",
    baseline: "tick judging every address (tickFullScan)",
    ours: o,
    baselineValue: b,
    unit: "µs CPU/tick",
    higherIsBetter: false,
  };
}
