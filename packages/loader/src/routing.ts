import { Code, WardenError, isPlanted } from "@warden/common";
import { ensureLoaded } from "./load-path.js";
import type { LoaderState } from "./loader-state.js";
import type { Lease } from "./loader-types.js";
import type { BackendHandle } from "./ports.js";

// Routing (DESIGN §3.3): a call gets a lease on a ready instance, counted by
// the watchdog; a call that saw the process gone removes it the normal way.

/**
 * Routes one call: ensures the model is loaded, looks it up under the shared
 * lifecycle lock (released at once — calls are counted by the watchdog, not
 * held on the lock) and starts tracking the call. `complete()` ends it
 * (idempotent); a remote-only instance becomes local+remote here.
 */
export async function acquire<H extends BackendHandle>(s: LoaderState<H>, modelId: string, signal: AbortSignal): Promise<Lease<H>> {
  for (;;) {
    const h = await ensureLoaded(s, modelId, signal);
    if (s.o.agents.isReachable?.(h.nodeId) === false) {
      // Accounted, not routable: the node's fate is unknown until it is back or lost.
      throw new WardenError(Code.Unavailable, `model "${modelId}" is on node "${h.nodeId}", which is unreachable; retry later`, { details: { nodeId: h.nodeId } });
    }
    // Planted bug "route-to-stopping": the lookup neither waits for a stop holding the lifecycle lock nor skips a pending instance.
    const release = isPlanted("route-to-stopping") ? noop : await s.locks.shared(modelId, signal);
    try {
      const v = s.core.instance(h.incarnation);
      if (s.held.get(h.incarnation) === h && h.address !== undefined && v !== undefined && v.state === "ready" && (v.pendingEviction === undefined || isPlanted("route-to-stopping"))) {
        const backend = h.backend ?? s.o.backends.connect(h.address, { nodeId: h.nodeId, model: h.model });
        h.backend = backend;
        if (h.placement === "remote-only") h.placement = "local-remote";
        const complete = s.core.trackRequest(h.address);
        return { incarnation: h.incarnation, nodeId: h.nodeId, address: h.address, model: h.model, backend, complete };
      }
    } finally {
      release();
    }
  }
}

/**
 * A routed call saw UNAVAILABLE: the process is gone. Remove it through the
 * normal path (an explicit `health` stop, force) so nothing is left behind.
 */
export async function reportUnavailable<H extends BackendHandle>(s: LoaderState<H>, incarnation: string): Promise<void> {
  const h = s.held.get(incarnation);
  if (h === undefined) return;
  await s.watchdog.stop(incarnation, { reason: "health", force: true });
}

function noop(): void {}
