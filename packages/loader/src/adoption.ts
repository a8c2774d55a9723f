import { loadDigest } from "./load-digest.js";
import { isPlanted } from "@warden/common";
import type { AdoptionSource } from "./loader-event.js";
import { holdInstance, type LoaderState } from "./loader-state.js";
import type { HeldInstance } from "./loader-types.js";
import type { ModelSpec } from "./model-spec.js";
import type { BackendHandle } from "./ports.js";

// Adoption and what the loader knows (DESIGN §3.3): instances found in a
// node's inventory or the stop-intent journal join the loader's tables —
// never twice, never after they were confirmed gone.

/** Remembers a confirmed-gone incarnation and tells the inventories, which fence older reports of it. */
export function rememberGone<H extends BackendHandle>(s: Pick<LoaderState<H>, "gone" | "o">, incarnation: string, nodeId: string): void {
  // Planted bug "adopt-confirmed-gone": the confirmation is not kept, so a stale inventory adopts the incarnation again.
  if (isPlanted("adopt-confirmed-gone")) return;
  s.gone.add(incarnation);
  s.o.inventories.confirmedGone?.(nodeId, incarnation);
}

/**
 * True when a routed call's failure is explained by a stop of its instance
 * (pending eviction, or already dropped): the call is not retried then.
 */
export function isBeingStopped<H extends BackendHandle>(s: LoaderState<H>, incarnation: string): boolean {
  return s.gone.has(incarnation) || s.leftovers.get(incarnation) !== undefined || s.core.instance(incarnation)?.pendingEviction !== undefined;
}

/**
 * Adopts an instance found only in a node's inventory as remote-only
 * (routable once first routed, when it becomes local+remote).
 */
export function adoptRemoteOnly<H extends BackendHandle>(s: LoaderState<H>, spec: ModelSpec, nodeId: string, address: string, incarnation: string, foundBy: AdoptionSource, startedWith = ""): boolean {
  if (s.held.has(incarnation) || s.core.instance(incarnation) !== undefined || s.leftovers.get(incarnation) !== undefined || s.gone.has(incarnation)) return false;
  // A stop of it is still in flight (sent before an operator's forget): it is
  // being stopped, never routable — the caller adopts it as a leftover.
  if (s.stopRpcs.has(incarnation)) return false;
  // The address still belongs to an earlier incarnation the loader holds (its
  // port was recycled and the inventory that drops it is still to come): the
  // watchdog would refuse the registration, so nothing is adopted now — the
  // next inventories remove the old one (twice missing) and adopt this one.
  if (s.core.instanceAt(address) !== undefined) return false;
  // The node says which load settings it was started with (a config changed while no coordinator watched: a rollout replaces it).
  const reported = startedWith !== "" && startedWith !== loadDigest(spec) ? { startedWith } : {};
  const h: HeldInstance<H> = { incarnation, model: spec.id, nodeId, spec, placement: "remote-only", phase: "ready", address, backend: undefined, gpu: undefined, startedAtMs: s.o.clock.now(), ...reported };
  holdInstance(s, h);
  s.core.registerReady({ nodeId, model: spec.id, incarnation, address, groups: spec.groups, pinned: spec.pinned, sizeBytes: spec.sizeBytes });
  s.o.events.emit({ type: "instance.adopted", nodeId, model: spec.id, address, incarnation, asLeftover: false, foundBy });
  return true;
}

/**
 * Adopts an instance as a leftover (stop requested, an open stop intent, a
 * model no longer configured): accounted, never routed, stop retried.
 * False (nothing changes) when the loader already tracks it or knows it gone.
 */
export function adoptLeftover<H extends BackendHandle>(s: LoaderState<H>, init: { readonly incarnation: string; readonly nodeId: string; readonly model: string; readonly address: string; readonly lastError: string; readonly foundBy: AdoptionSource }): boolean {
  const inc = init.incarnation;
  if (s.held.has(inc) || s.core.instance(inc) !== undefined || s.leftovers.get(inc) !== undefined || s.gone.has(inc)) return false;
  const spec = s.models.get(init.model);
  s.leftovers.add({ incarnation: inc, nodeId: init.nodeId, model: init.model, address: init.address, lastError: init.lastError, groups: spec?.groups ?? [], sizeBytes: spec?.sizeBytes ?? 0 });
  s.o.events.emit({ type: "instance.adopted", nodeId: init.nodeId, model: init.model, address: init.address, incarnation: inc, asLeftover: true, foundBy: init.foundBy });
  return true;
}

/**
 * At start: every open stop intent of the journal is a leftover on its
 * node at once — accounted (memory, LRU count, groups), listed, answered by
 * UnloadModel — whether or not its node has registered yet. Its node's
 * first inventory reaps it (absent) or its stop is retried (present).
 */
export function restoreStopIntents<H extends BackendHandle>(s: LoaderState<H>, intents: readonly { readonly incarnation: string; readonly nodeId: string; readonly model: string; readonly address: string }[]): number {
  let adopted = 0;
  for (const i of intents) {
    // Planted bug "forget-intents-of-unregistered-nodes": only nodes already registered keep their open intents.
    if (isPlanted("forget-intents-of-unregistered-nodes") && s.o.agents.agent(i.nodeId) === undefined) {
      void s.o.journal.clearStopIntent(i.incarnation).catch(() => undefined);
      continue;
    }
    if (adoptLeftover(s, { incarnation: i.incarnation, nodeId: i.nodeId, model: i.model, address: i.address, lastError: "open stop intent restored at start", foundBy: "journal" })) adopted++;
  }
  return adopted;
}

/** True when the loader tracks this incarnation in any form. */
export function knows<H extends BackendHandle>(s: LoaderState<H>, incarnation: string): boolean {
  return s.held.has(incarnation) || s.leftovers.get(incarnation) !== undefined || s.core.instance(incarnation) !== undefined || s.gone.has(incarnation);
}
