import type { StartEvent } from "./ports.js";

/** Artifacts one start tracks: a model names at most 16 (the config's bound); more from an agent are ignored. */
const maxArtifacts = 16;

/**
 * One start's artifact pulls, from the agent's `pulling` events (one per
 * artifact per step), summed for its load job: `pulling` while some bytes are
 * still to come, `verifying` once all arrived but some are not verified yet,
 * `starting` when every one is verified (the spawn follows).
 */
export class ArtifactProgress {
  private readonly bySha = new Map<string, { done: number; total: number; verified: boolean }>();

  report(ev: Extract<StartEvent, { t: "pulling" }>): { readonly phase: "pulling" | "verifying" | "starting"; readonly doneBytes: number; readonly totalBytes: number } {
    if (this.bySha.has(ev.sha256) || this.bySha.size < maxArtifacts) this.bySha.set(ev.sha256, { done: ev.doneBytes, total: ev.totalBytes, verified: ev.verified });
    let doneBytes = 0;
    let totalBytes = 0;
    let allArrived = true;
    let allVerified = true;
    for (const a of this.bySha.values()) {
      doneBytes += a.done;
      totalBytes += a.total;
      if (a.done < a.total) allArrived = false;
      if (!a.verified) allVerified = false;
    }
    return { phase: allVerified ? "starting" : allArrived ? "verifying" : "pulling", doneBytes, totalBytes };
  }
}
