import { invalidArgument } from "@warden/common";
import { describeValue } from "./describe-value.js";
import type { WatchdogPolicy } from "./policy.js";

/** A GPU index, or `"ram"` for a node without GPUs (system memory). */
export type MemoryDevice = number | "ram";

/** One memory reading for a node, as the agent's heartbeat reports it. */
export interface MemoryReading {
  readonly gpus: readonly { readonly index: number; readonly totalBytes: number; readonly usedBytes: number }[];
  /** System memory; used only when the node reports no GPU. */
  readonly ram?: { readonly totalBytes: number; readonly usedBytes: number };
}

/** A pressure transition, for metrics and events. */
export interface PressureChange {
  readonly nodeId: string;
  readonly device: MemoryDevice;
  readonly on: boolean;
  readonly ratio: number;
  readonly atMs: number;
}

interface DeviceState {
  ratio: number;
  on: boolean;
  /** Since when the ratio has been below the release threshold (while on). */
  belowSinceMs: number | undefined;
}

function bytes(field: string, v: unknown): number {
  if (typeof v !== "number" || !Number.isFinite(v) || v < 0) throw invalidArgument(field, `must be a finite number of bytes >= 0, got ${describeValue(v)}`);
  return v;
}

/**
 * Per-node memory pressure with hysteresis (DESIGN §3.4 item 7; kubelet's
 * pressure transition period): on when any device is strictly above the
 * threshold, off only after every device stayed below the release threshold
 * for the hold period. Per device, so pressure on one GPU is not averaged
 * away by an idle one (LocalAI W8).
 */
export class NodeMemory {
  private readonly devices = new Map<MemoryDevice, DeviceState>();
  /** Clock time of the latest reading. */
  readingAtMs: number | undefined;
  /** Incarnation of the reclaimer victim in flight on this node: one at a time. */
  reclaimInFlight: string | undefined;
  /** When the last reclaimer eviction on this node settled as stopped. */
  lastReclaimSettledAtMs: number | undefined;

  constructor(private readonly nodeId: string) {}

  /** Validates and records a reading; returns the transitions to `on` it caused. */
  report(reading: MemoryReading, nowMs: number, policy: WatchdogPolicy, maxDevices: number): PressureChange[] {
    const gpusInput: unknown = reading.gpus;
    if (!Array.isArray(gpusInput)) throw invalidArgument("gpus", "must be a list");
    if (reading.gpus.length > maxDevices) throw invalidArgument("gpus", `at most ${maxDevices} devices`);
    const ratios = new Map<MemoryDevice, number>();
    reading.gpus.forEach((g, i) => {
      if (!Number.isInteger(g.index) || g.index < 0) throw invalidArgument(`gpus[${i}].index`, "must be an integer >= 0");
      const total = bytes(`gpus[${i}].totalBytes`, g.totalBytes);
      const used = bytes(`gpus[${i}].usedBytes`, g.usedBytes);
      // A device reporting no total has nothing to measure (LocalAI returns early on total 0).
      if (total > 0) ratios.set(g.index, Math.min(1, used / total));
    });
    if (reading.gpus.length === 0 && reading.ram !== undefined) {
      const total = bytes("ram.totalBytes", reading.ram.totalBytes);
      const used = bytes("ram.usedBytes", reading.ram.usedBytes);
      if (total > 0) ratios.set("ram", Math.min(1, used / total));
    }
    // Devices that disappeared from the report are forgotten.
    for (const d of [...this.devices.keys()]) if (!ratios.has(d)) this.devices.delete(d);
    this.readingAtMs = nowMs;
    for (const [d, r] of ratios) {
      const s = this.devices.get(d) ?? { ratio: r, on: false, belowSinceMs: undefined };
      s.ratio = r;
      this.devices.set(d, s);
    }
    return this.evaluate(nowMs, policy);
  }

  /** Applies the hysteresis at `nowMs`; returns transitions. Called on each reading and each tick. */
  evaluate(nowMs: number, policy: WatchdogPolicy): PressureChange[] {
    const changes: PressureChange[] = [];
    for (const [device, s] of this.devices) {
      if (!s.on) {
        if (s.ratio > policy.memoryThreshold) {
          s.on = true;
          s.belowSinceMs = undefined;
          changes.push({ nodeId: this.nodeId, device, on: true, ratio: s.ratio, atMs: nowMs });
        }
        continue;
      }
      if (s.ratio >= policy.memoryReleaseThreshold) {
        s.belowSinceMs = undefined;
        continue;
      }
      s.belowSinceMs ??= nowMs;
      if (nowMs - s.belowSinceMs >= policy.memoryReleaseHoldMs) {
        s.on = false;
        s.belowSinceMs = undefined;
        changes.push({ nodeId: this.nodeId, device, on: false, ratio: s.ratio, atMs: nowMs });
      }
    }
    return changes;
  }

  /**
   * Devices the reclaimer should free memory on now: pressure on and the latest
   * reading still at or above the release threshold (below it, we wait out
   * the hold instead of over-evicting).
   */
  devicesToRelieve(policy: WatchdogPolicy): MemoryDevice[] {
    const out: MemoryDevice[] = [];
    for (const [d, s] of this.devices) if (s.on && s.ratio >= policy.memoryReleaseThreshold) out.push(d);
    return out;
  }

  /** True when the release wait after the last reclaimer settle is over: a newer reading arrived, or the wait elapsed. */
  releaseWaitOver(nowMs: number, policy: WatchdogPolicy): boolean {
    const settled = this.lastReclaimSettledAtMs;
    if (settled === undefined) return true;
    if (this.readingAtMs !== undefined && this.readingAtMs > settled) return true;
    return nowMs - settled >= policy.memoryReleaseWaitMs;
  }

  view(): { device: MemoryDevice; ratio: number; pressure: boolean }[] {
    return [...this.devices].map(([device, s]) => ({ device, ratio: s.ratio, pressure: s.on }));
  }

  hasPressure(): boolean {
    for (const s of this.devices.values()) if (s.on) return true;
    return false;
  }
}
