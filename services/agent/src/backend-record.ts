import { isHex64, isUlid } from "@warden/common";

/** `stopRequested` as recorded: which incarnation, why, when (epoch ms). */
export interface StopRequestRecord {
  incarnation: string;
  reason: string;
  atMs: number;
}

/**
 * What the agent persists per backend so a restarted agent neither forgets a
 * live process nor adopts a stranger: the pid plus its start time (field 22 of
 * /proc/<pid>/stat) identifies the process even if the pid is recycled.
 */
export interface BackendRecord {
  version: 1;
  incarnation: string;
  model: string;
  backend: string;
  /** host:port the backend was told to bind. */
  address: string;
  pid: number;
  pidStartTime: string;
  /** CUDA_VISIBLE_DEVICES value, "" when none. */
  gpuDevice: string;
  startedAtMs: number;
  /** "loading" until LoadModel succeeded. */
  phase: "loading" | "ready";
  /** The coordinator's digest of the start's load settings; "" when none (or a record written before it existed). */
  loadDigest: string;
  /** Digests of the cached artifacts the backend uses (at most 16); absent in records of older agents (not known). */
  artifactDigests?: string[];
  /** sha256 of the backend bundle it was started from; absent when none (or a record of an older agent). */
  bundleDigest?: string;
  stopRequested: StopRequestRecord | null;
}

/** A record file that could not be trusted as complete; its process (if alive) is an orphan. */
export interface PartialRecord {
  file: string;
  pid: number | undefined;
  model: string;
  address: string;
  detail: string;
}

export type ParsedRecord = { kind: "complete"; record: BackendRecord } | { kind: "partial"; partial: PartialRecord };

function isRecordObj(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Validates a record file's content. Anything not fully valid is partial, with the fields that could be read. */
export function parseBackendRecord(file: string, text: string): ParsedRecord {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return { kind: "partial", partial: { file, pid: undefined, model: "", address: "", detail: "record is not valid JSON" } };
  }
  const o = isRecordObj(raw) ? raw : {};
  const pid = typeof o.pid === "number" && Number.isInteger(o.pid) && o.pid > 0 ? o.pid : undefined;
  const model = typeof o.model === "string" ? o.model : "";
  const address = typeof o.address === "string" ? o.address : "";
  const partial = (detail: string): ParsedRecord => ({ kind: "partial", partial: { file, pid, model, address, detail } });
  if (typeof o.incarnation !== "string" || !isUlid(o.incarnation)) return partial("record missing incarnation");
  if (pid === undefined) return partial("record missing pid");
  if (typeof o.pidStartTime !== "string" || !/^\d+$/.test(o.pidStartTime)) return partial("record missing pid start time");
  if (model === "" || address === "" || typeof o.backend !== "string") return partial("record missing model, address or backend");
  const sr = o.stopRequested;
  let stopRequested: StopRequestRecord | null = null;
  if (isRecordObj(sr) && typeof sr.incarnation === "string" && typeof sr.reason === "string" && typeof sr.atMs === "number") {
    stopRequested = { incarnation: sr.incarnation, reason: sr.reason, atMs: sr.atMs };
  }
  return {
    kind: "complete",
    record: {
      version: 1,
      incarnation: o.incarnation,
      model,
      backend: o.backend,
      address,
      pid,
      pidStartTime: o.pidStartTime,
      gpuDevice: typeof o.gpuDevice === "string" ? o.gpuDevice : "",
      startedAtMs: typeof o.startedAtMs === "number" ? o.startedAtMs : 0,
      loadDigest: typeof o.loadDigest === "string" && o.loadDigest.length <= 64 ? o.loadDigest : "",
      ...(Array.isArray(o.artifactDigests) && o.artifactDigests.length <= 16 && o.artifactDigests.every((d) => typeof d === "string" && isHex64(d)) ? { artifactDigests: o.artifactDigests as string[] } : {}),
      ...(typeof o.bundleDigest === "string" && isHex64(o.bundleDigest) ? { bundleDigest: o.bundleDigest } : {}),
      phase: o.phase === "ready" ? "ready" : "loading",
      stopRequested,
    },
  };
}
