import type { StartEvent } from "./ports.js";

/** Artifacts one start tracks: a model names at most 16 (the config's bound); more from an agent are ignored. */
const maxArtifacts = 16;

/** A start's phase before the spawn, as its load job shows it. */
export type PrespawnPhase = "resolving" | "pulling" | "verifying" | "unpacking" | "starting";

/**
 * One start's work before the spawn, from the agent's events, summed for its
 * load job. `pulling` events (one per artifact per step, a backend bundle's
 * layers among them) make `pulling` while some bytes are still to come,
 * `verifying` once all arrived but some are not verified yet; with every
 * artifact verified, a backend bundle's `stage` says the rest: `resolving`
 * (its image's manifest is read, before any layer is known), `unpacking`
 * (its layers are extracted); `starting` when nothing is left (the spawn
 * follows). Bytes still to come outrank a bundle's stage: they are what the
 * job waits for longest, and the phase does not flip with every event of two
 * things running at once.
 */
export class ArtifactProgress {
  private readonly bySha = new Map<string, { done: number; total: number; verified: boolean }>();
  private bundle: Extract<StartEvent, { t: "stage" }>["stage"] | undefined;

  report(ev: Extract<StartEvent, { t: "pulling" } | { t: "stage" }>): { readonly phase: PrespawnPhase; readonly doneBytes: number; readonly totalBytes: number } {
    if (ev.t === "stage") this.bundle = ev.stage;
    else if (this.bySha.has(ev.sha256) || this.bySha.size < maxArtifacts) this.bySha.set(ev.sha256, { done: ev.doneBytes, total: ev.totalBytes, verified: ev.verified });
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
    const rest = this.bundle === "resolving" || this.bundle === "unpacking" ? this.bundle : "starting";
    return { phase: allVerified ? rest : allArrived ? "verifying" : "pulling", doneBytes, totalBytes };
  }
}
