import { execFile } from "node:child_process";

/** One GPU as nvidia-smi reports it. */
export interface GpuReading {
  index: number;
  name: string;
  totalBytes: number;
  usedBytes: number;
}

const mib = 1024 * 1024;

/** Arguments of the GPU query (exact, so a fake script can match them). */
export const gpuQueryArgs = ["--query-gpu=index,name,memory.total,memory.used", "--format=csv,noheader,nounits"] as const;
/** Arguments of the per-process query. */
export const computeAppsQueryArgs = ["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"] as const;

/** Parses `index, name, memory.total, memory.used` lines (MiB, no units). Malformed lines are skipped. */
export function parseGpuCsv(text: string): GpuReading[] {
  const out: GpuReading[] = [];
  for (const line of text.split("\n")) {
    const f = line.split(",").map((s) => s.trim());
    if (f.length < 4) continue;
    const index = Number(f[0]);
    const total = Number(f[f.length - 2]);
    const used = Number(f[f.length - 1]);
    if (!Number.isInteger(index) || !Number.isFinite(total) || !Number.isFinite(used) || total < 0 || used < 0) continue;
    // GPU names may contain commas; everything between index and the two numbers is the name.
    const nameEnd = line.lastIndexOf(",", line.lastIndexOf(",") - 1);
    const name = line.slice(line.indexOf(",") + 1, nameEnd).trim();
    out.push({ index, name, totalBytes: Math.round(total * mib), usedBytes: Math.round(used * mib) });
  }
  return out;
}

/** Parses `pid, used_memory` lines into pid → bytes (summed over GPUs). */
export function parseComputeAppsCsv(text: string): Map<number, number> {
  const out = new Map<number, number>();
  for (const line of text.split("\n")) {
    const f = line.split(",").map((s) => s.trim());
    if (f.length !== 2) continue;
    const pid = Number(f[0]);
    const used = Number(f[1]);
    if (!Number.isInteger(pid) || pid <= 0 || !Number.isFinite(used) || used < 0) continue;
    out.set(pid, (out.get(pid) ?? 0) + Math.round(used * mib));
  }
  return out;
}

/**
 * Runs nvidia-smi with an argument array (no shell); resolves stdout, rejects on
 * failure or timeout. The caller's (often long-lived) signal is bridged through
 * a per-call controller whose listener is removed when the call ends: Node's
 * spawn leaves its abort listener behind when the executable is missing, which
 * would otherwise pile up on the caller's signal at every heartbeat.
 */
export function runNvidiaSmi(path: string, args: readonly string[], timeoutMs: number, signal?: AbortSignal): Promise<string> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted === true) {
      reject(new Error(`${path}: aborted`));
      return;
    }
    const ctl = new AbortController();
    const onAbort = (): void => {
      ctl.abort();
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    execFile(path, [...args], { timeout: timeoutMs, signal: ctl.signal, maxBuffer: 1024 * 1024, encoding: "utf8" }, (err, stdout) => {
      signal?.removeEventListener("abort", onAbort);
      if (err !== null) reject(new Error(`${path}: ${err.message}`, { cause: err }));
      else resolve(stdout);
    });
  });
}
