import { computeAppsQueryArgs, gpuQueryArgs, parseComputeAppsCsv, parseGpuCsv, runNvidiaSmi, type GpuReading } from "./nvidia-smi.js";
import { readMeminfo, readRssBytes, type RamInfo } from "./proc-fs.js";

/** A measurement of the node and of the given pids. */
export interface MemoryReading {
  gpus: GpuReading[];
  ram: RamInfo;
  /** pid → bytes: GPU memory from nvidia-smi when the pid uses a GPU, else its RSS. */
  perPidBytes: Map<number, number>;
  /** True when nvidia-smi answered. */
  gpuAvailable: boolean;
}

export interface MemoryProbeOptions {
  /** nvidia-smi executable; "" skips GPU queries. */
  nvidiaSmiPath: string;
  /** @default 5000 */
  nvidiaSmiTimeoutMs?: number;
  /** @default "/proc" */
  procRoot?: string;
}

/**
 * Measures memory: GPUs and per-process GPU memory through nvidia-smi (two fixed
 * queries), RAM from /proc/meminfo, per-process RSS from /proc/<pid>/status for
 * processes without GPU memory. A missing or failing nvidia-smi means "no GPU"
 * (the RAM fallback), never an error.
 */
export function createMemoryProbe(options: MemoryProbeOptions): (pids: readonly number[], signal?: AbortSignal) => Promise<MemoryReading> {
  const timeoutMs = options.nvidiaSmiTimeoutMs ?? 5_000;
  const procRoot = options.procRoot ?? "/proc";
  return async (pids, signal) => {
    let gpus: GpuReading[] = [];
    let apps = new Map<number, number>();
    let gpuAvailable = false;
    if (options.nvidiaSmiPath !== "") {
      try {
        gpus = parseGpuCsv(await runNvidiaSmi(options.nvidiaSmiPath, gpuQueryArgs, timeoutMs, signal));
        gpuAvailable = true;
        if (pids.length > 0) apps = parseComputeAppsCsv(await runNvidiaSmi(options.nvidiaSmiPath, computeAppsQueryArgs, timeoutMs, signal));
      } catch {
        // no GPU tooling on this node: fall back to RAM
      }
    }
    const ram = await readMeminfo(procRoot);
    const perPidBytes = new Map<number, number>();
    for (const pid of pids) {
      const gpu = apps.get(pid);
      perPidBytes.set(pid, gpu !== undefined && gpu > 0 ? gpu : await readRssBytes(pid, procRoot));
    }
    return { gpus, ram, perPidBytes, gpuAvailable };
  };
}
