/**
 * Ground truth from the process table: samples the backend processes this
 * file's agents run (tagged backend-sim, read from /proc) every `intervalMs`.
 * A sample lists only processes alive at one common moment: a first pass scans
 * /proc and reads each process's mark (node, incarnation), a second pass
 * checks each one is still alive; a process alive at both passes was alive
 * from the end of the first to the start of the second, so two processes in
 * one sample really ran together (a stop followed by a start never shows as an
 * overlap because the scan was slow). A process seen once and later not alive
 * is a disappearance, recorded with the sample numbers around it.
 */
import { readFile, readdir } from "node:fs/promises";
import { pidAlive, testTagVar } from "./agent-harness.js";
import type { RunningBackend } from "./chaos-checks.js";

export interface BackendSample {
  /** 0, 1, 2…: the order of samples (no wall time: the checks must not depend on it). */
  readonly n: number;
  readonly backends: readonly RunningBackend[];
}

export interface Disappearance {
  readonly pid: number;
  readonly nodeId: string;
  readonly incarnation: string;
  /** The last sample it was in, and the first one after it was found gone. */
  readonly lastSeen: number;
  readonly goneBy: number;
}

export interface SamplerResult {
  readonly samples: readonly BackendSample[];
  readonly disappeared: readonly Disappearance[];
  /** Every incarnation ever seen running (node/incarnation key → backend). */
  readonly seen: ReadonlyMap<string, RunningBackend>;
}

export interface ProcessSampler {
  /** Ends sampling after the sample under way; returns everything observed. */
  stop(): Promise<SamplerResult>;
  /** Samples taken so far. */
  count(): number;
}

/**
 * What each pid is, read once: a backend of this file (its mark) or not ours.
 * A pid's mark never changes after exec, but one caught between fork and exec
 * still shows its parent's command line, so "not ours" is trusted only once
 * seen on two scans (a full scan of /proc per sample is too slow on a loaded
 * machine for a 200 ms period).
 */
class PidIdentities {
  private readonly known = new Map<number, RunningBackend | "not ours" | "not ours once">();

  constructor(private readonly tagPrefix: string) {}

  async scan(): Promise<RunningBackend[]> {
    const out: RunningBackend[] = [];
    const present = new Set<number>();
    for (const d of await readdir("/proc")) {
      if (!/^\d+$/.test(d)) continue;
      const pid = Number(d);
      present.add(pid);
      const k = this.known.get(pid);
      if (k === "not ours") continue;
      if (k !== undefined && k !== "not ours once") {
        out.push(k);
        continue;
      }
      const id = await this.identify(pid);
      if (id === undefined) this.known.set(pid, k === "not ours once" ? "not ours" : "not ours once");
      else if (id !== "gone") {
        this.known.set(pid, id);
        out.push(id);
      }
    }
    for (const pid of this.known.keys()) if (!present.has(pid)) this.known.delete(pid);
    return out;
  }

  private async identify(pid: number): Promise<RunningBackend | undefined | "gone"> {
    try {
      const cmd = await readFile(`/proc/${String(pid)}/cmdline`, "utf8");
      // From sources through tsx, or the prebuilt bundle (WARDEN_BACKEND_SIM_BUNDLE).
      if (!cmd.includes("backend-sim/src/main.ts") && !cmd.includes("/backend-sim.js")) return undefined;
      const env = new Map((await readFile(`/proc/${String(pid)}/environ`, "utf8")).split("\0").map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)] as const));
      if (!(env.get(testTagVar) ?? "").startsWith(this.tagPrefix)) return undefined;
      return { pid, nodeId: env.get("WARDEN_NODE_ID") ?? "", incarnation: env.get("WARDEN_INCARNATION") ?? "" };
    } catch {
      return "gone";
    }
  }
}

export function sampleProcesses(tagPrefix: string, intervalMs = 200): ProcessSampler {
  const ids = new PidIdentities(tagPrefix);
  const samples: BackendSample[] = [];
  const disappeared: Disappearance[] = [];
  const seen = new Map<string, RunningBackend>();
  // pid → (backend, last sample it was confirmed in)
  const live = new Map<number, { b: RunningBackend; last: number }>();
  const state = { on: true };
  const loop = (async () => {
    while (state.on) {
      const n = samples.length;
      const first = await ids.scan();
      const alive = await Promise.all(first.map((b) => pidAlive(b.pid)));
      const both = first.filter((_, i) => alive[i] === true);
      samples.push({ n, backends: both });
      const now = new Set(both.map((b) => b.pid));
      for (const b of both) {
        live.set(b.pid, { b, last: n });
        seen.set(`${b.nodeId}/${b.incarnation}`, b);
      }
      for (const [pid, v] of live) {
        if (now.has(pid) || (await pidAlive(pid))) continue;
        live.delete(pid);
        disappeared.push({ pid, nodeId: v.b.nodeId, incarnation: v.b.incarnation, lastSeen: v.last, goneBy: n });
      }
      await new Promise((r) => setTimeout(r, intervalMs));
    }
  })();
  return {
    count: () => samples.length,
    async stop() {
      state.on = false;
      await loop;
      return { samples, disappeared, seen };
    },
  };
}
