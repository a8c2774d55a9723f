import { BackendState, type InventoryEntry } from "@warden/proto";
import { isUlid } from "@warden/common";
import type { AdoptionSource, Loader, ReportFloor } from "@warden/loader";

/** An adoption the loader committed (it publishes instance.adopted itself). */
export interface Adoption {
  readonly nodeId: string;
  readonly model: string;
  readonly incarnation: string;
  readonly as: "remote-only" | "leftover";
  /** Why a leftover: a stop was requested, a stop intent is open, or the model is not configured. */
  readonly foundBy?: AdoptionSource;
}

export interface ReconcileInput {
  readonly nodeId: string;
  /** The unfenced inventory just stored for the node. */
  readonly inventory: readonly InventoryEntry[];
  /** The report that carried it: a ready instance whose start came after it is not missing from it. */
  readonly report?: { readonly bootEpoch: bigint; readonly sequence: bigint };
  /** Ready instances and leftovers missing from consecutive inventories (mutated: vanished after two). */
  readonly missing: Map<string, number>;
  /** Whether a stop intent is open for an incarnation (from the outbox). */
  readonly openIntent: (incarnation: string) => boolean;
  readonly onAdopted?: (a: Adoption) => void;
}

/**
 * Reconciles one node's inventory with the loader: exited entries are gone;
 * unknown valid incarnations are adopted (remote-only, or leftover when a stop
 * was requested, a stop intent is open or the model is not configured); ready
 * instances the inventory lacks are gone after two consecutive inventories
 * (one may race a start); leftovers it lacks twice are reaped. Returns the live
 * incarnations it lists, for the stop intents they settle.
 */
export function reconcileInventory(loader: Loader, r: ReconcileInput): Set<string> {
  const seen = new Set<string>();
  for (const e of r.inventory) {
    seen.add(e.incarnation);
    if (e.state === BackendState.EXITED) {
      loader.onBackendGone(e.incarnation, { exitCode: undefined, signal: "", intentional: e.stopRequested !== undefined, lastStderrLine: "" });
      continue;
    }
    if (loader.knows(e.incarnation) || !isUlid(e.incarnation)) continue;
    if (e.state !== BackendState.READY && e.stopRequested === undefined) continue; // a start in progress elsewhere settles itself
    const spec = loader.modelSpec(e.model);
    // A stop still in flight (sent before an operator's forget) counts as requested: never routable.
    const foundBy = e.stopRequested !== undefined || loader.stopInFlight(e.incarnation) ? "stop-requested" : r.openIntent(e.incarnation) ? "open-stop-intent" : spec === undefined ? "unconfigured" : undefined;
    if (foundBy === undefined && spec !== undefined) {
      if (loader.adoptRemoteOnly(spec, r.nodeId, e.address, e.incarnation, "inventory", e.loadDigest)) r.onAdopted?.({ nodeId: r.nodeId, model: e.model, incarnation: e.incarnation, as: "remote-only" });
    } else {
      const lastError = foundBy === "unconfigured" ? "adopted from inventory: model not configured" : "adopted from inventory with a stop requested";
      if (loader.adoptLeftover({ incarnation: e.incarnation, nodeId: r.nodeId, model: e.model, address: e.address, lastError, foundBy: foundBy ?? "unconfigured" })) {
        r.onAdopted?.({ nodeId: r.nodeId, model: e.model, incarnation: e.incarnation, as: "leftover", ...(foundBy === undefined ? {} : { foundBy }) });
      }
    }
  }
  // The node's own instances only (per-node indexes): a heartbeat costs what that node holds.
  for (const h of loader.heldOn(r.nodeId)) {
    if (h.phase !== "ready") continue;
    // Taken before the process existed (a timed-out Heartbeat the next one overtook): no evidence either way.
    if (predates(r.report, h.reportFloor)) continue;
    if (missedTwice(r.missing, seen, h.incarnation)) {
      loader.onBackendGone(h.incarnation, { exitCode: undefined, signal: "", intentional: false, lastStderrLine: "vanished from the agent's inventory" });
    }
  }
  // Leftovers too need two: a delayed inventory from before a start (or from
  // before a restarted coordinator's first heartbeat) lacks a process that is
  // alive, and reaping it on that word alone forgets it (invariant 1).
  for (const l of loader.leftoversOn(r.nodeId)) {
    if (missedTwice(r.missing, seen, l.incarnation)) {
      loader.onBackendGone(l.incarnation, { exitCode: undefined, signal: "", intentional: true, lastStderrLine: "" });
    }
  }
  return new Set(r.inventory.filter((e) => e.state !== BackendState.EXITED).map((e) => e.incarnation));
}

/**
 * The first inventory entry naming an incarnation the loader holds on
 * another node (one map lookup per entry): a node never reports, adopts or
 * ends another node's instances.
 */
export function otherNodesIncarnation(loader: Loader, nodeId: string, backends: readonly InventoryEntry[]): { index: number; incarnation: string; owner: string } | undefined {
  for (let i = 0; i < backends.length; i++) {
    const inc = backends[i]?.incarnation ?? "";
    const owner = loader.nodeOf(inc);
    if (owner !== undefined && owner !== nodeId) return { index: i, incarnation: inc, owner };
  }
  return undefined;
}

function predates(report: ReconcileInput["report"], floor: ReportFloor | undefined): boolean {
  return report !== undefined && floor !== undefined && report.bootEpoch === floor.bootEpoch && report.sequence <= floor.sequence;
}

/** Counts one more inventory lacking `incarnation`; true (and forgets the count) at the second in a row. */
function missedTwice(missing: Map<string, number>, seen: ReadonlySet<string>, incarnation: string): boolean {
  if (seen.has(incarnation)) {
    missing.delete(incarnation);
    return false;
  }
  const count = (missing.get(incarnation) ?? 0) + 1;
  if (count < 2) {
    missing.set(incarnation, count);
    return false;
  }
  missing.delete(incarnation);
  return true;
}
