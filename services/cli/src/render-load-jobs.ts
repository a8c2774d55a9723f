import { formatDurationMs } from "@warden/common";
import { LoadJobPhase, LoadJobState, type LoadJob, type ModelReplicas } from "@warden/proto";

function phaseText(p: LoadJobPhase): string {
  return LoadJobPhase[p].toLowerCase().replace(/_/g, " ");
}

/** What a waiting job waits for, as the progress line and `models ls` say it. */
export function waitingText(j: Pick<LoadJob, "phase">): string {
  if (j.phase === LoadJobPhase.WAITING_FOR_RECOVERY) return "waiting for the recovery window";
  return j.phase === LoadJobPhase.WAITING_FOR_INSTANCE ? "waiting for its instance" : "waiting for a node";
}

/** Bytes per second in MiB/s with one decimal (KiB/s below 1 MiB/s). */
function rateText(bps: bigint): string {
  const n = Number(bps);
  return n >= 1024 ** 2 ? `${(n / 1024 ** 2).toFixed(1)} MiB/s` : `${(n / 1024).toFixed(1)} KiB/s`;
}

/** A loading job's phase, with the percent and rate where it reports them: "pulling, 42%, 11.8 MiB/s", "starting". */
export function loadingProgress(j: Pick<LoadJob, "phase" | "bytesDone" | "bytesTotal" | "bytesPerSecond">): string {
  const progress = j.bytesTotal > 0n ? `, ${String((j.bytesDone * 100n) / j.bytesTotal)}%${j.bytesPerSecond > 0n ? `, ${rateText(j.bytesPerSecond)}` : ""}` : "";
  return `${phaseText(j.phase)}${progress}`;
}

/**
 * The progress line of a load (`models load`, a call loading on demand) once
 * its job is loading: "loading m (pulling, 42%, 11.8 MiB/s) on gpu-3", as
 * `models ls` says the job.
 */
export function loadingLabel(j: Pick<LoadJob, "model" | "nodeId" | "phase" | "bytesDone" | "bytesTotal" | "bytesPerSecond">): string {
  return `loading ${j.model} (${loadingProgress(j)})${j.nodeId === "" ? "" : ` on ${j.nodeId}`}`;
}

/**
 * One line per load job: "<model>: waiting for a node: <reason> (12s)"
 * (or "waiting for the recovery window: …" after a coordinator's start),
 * "<model>: loading (starting) on <node> (3s)", "<model>: failed: <reason> (<CODE>, 2m ago)".
 * `humanBytes` shows placement reasons' raw byte counts in GiB, as elsewhere.
 */
export function loadJobLine(j: LoadJob, humanBytes: (r: string) => string = (r) => r): string {
  const age = formatDurationMs(Number(j.forMs));
  switch (j.state) {
    case LoadJobState.WAITING:
      return `${j.model}: ${waitingText(j)}: ${humanBytes(j.reason)} (${age})`;
    case LoadJobState.LOADING:
      return `${j.model}: loading (${loadingProgress(j)})${j.nodeId === "" ? "" : ` on ${j.nodeId}`} (${age})`;
    case LoadJobState.FAILED:
      return `${j.model}: failed: ${humanBytes(j.reason)} (${j.code === "" ? "failed" : j.code}, ${age} ago)`;
    default:
      return `${j.model}: state ${String(j.state)}`;
  }
}

/** `models ls`' load jobs, one line each, after a "LOAD JOBS" heading; "" when there are none. */
export function loadJobsText(replicas: readonly ModelReplicas[], model: string | undefined, humanBytes?: (r: string) => string): string {
  const lines: string[] = [];
  for (const r of replicas) if (r.loadJob !== undefined && (model === undefined || r.model === model)) lines.push(loadJobLine(r.loadJob, humanBytes));
  return lines.length === 0 ? "" : `LOAD JOBS\n${lines.join("\n")}`;
}
