import type { MemoryBar } from "./view-model.js";
import { formatBytes } from "./view-model.js";

/** Drift past this share of the total is flagged — on GPUs only (see driftNote). */
const highDriftShare = 0.1;

/**
 * What the node card says about memory drift (measured − accounted), and
 * whether it is alarming. On GPUs the agent measures what the backends hold,
 * so a large gap means memory Warden does not know about (or an estimate that
 * is wrong). Without GPUs the agent measures the whole host's used RAM —
 * the OS, the coordinator, everything — so a gap is expected at rest and is
 * never shown as an alarm. Pure: the tooltip and the colour come from here.
 */
export function driftNote(m: MemoryBar): { readonly high: boolean; readonly title: string } {
  const measured = m.source === "gpu" ? "GPU memory in use, as the agent measured it at its last heartbeat" : m.source === "ram" ? "the host's used RAM, as the agent measured it (every process on the machine, not only backends)" : "nothing (the agent reported no memory)";
  const gap = `drift ${formatBytes(m.driftBytes)} = measured ${formatBytes(m.measuredBytes)} − accounted ${formatBytes(m.accountedBytes)}`;
  const why = m.source === "gpu" ? (m.driftBytes >= 0 ? "positive: memory Warden did not place (another process, or a backend using more than its estimate)" : "negative: estimates Warden holds that the GPUs do not show (yet)") : "expected at rest: the measure includes everything else on the host";
  return {
    high: m.source === "gpu" && m.totalBytes > 0 && Math.abs(m.driftBytes) > m.totalBytes * highDriftShare,
    title: `Measured: ${measured}. Accounted: what Warden reserves for the instances it placed (its estimates), the figure placement uses. ${gap}; ${why}.`,
  };
}
