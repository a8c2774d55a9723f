import { Code, WardenError, isPlanted } from "@warden/common";
import { ensureLoaded } from "./load-path.js";
import type { LoaderState } from "./loader-state.js";
import type { HeldInstance, Lease, RouteHint } from "./loader-types.js";
import type { ModelSpec } from "./model-spec.js";
import type { BackendHandle } from "./ports.js";
import { maybeScaleUp } from "./replica-loads.js";
import { chooseReplica, pickReplica, preferredReplica, routableNode } from "./replica-routing.js";

// Routing (DESIGN §3.3): a call gets a lease on the least-loaded
// ready replica, counted by the watchdog; a call that saw the process gone
// removes it the normal way.

/**
 * Routes one call: ensures a replica is ready (waiting in the bounded
 * per-model queue only when none is), then — in one synchronous turn, so
 * concurrent calls spread — picks the least-loaded ready replica, takes its
 * shared lifecycle lock for the lookup only (calls are counted by the
 * watchdog, not held on the lock), may start a scale-up, and starts tracking
 * the call. A replica whose lock a stop holds is waited for, then routing
 * starts over. `complete()` ends the call (idempotent); a remote-only
 * instance becomes local+remote here. A `hint` may send the call to another
 * routable replica than the least loaded (preferredReplica); the scale-up
 * still looks at the least loaded one.
 */
export async function acquire<H extends BackendHandle>(s: LoaderState<H>, modelId: string, signal: AbortSignal, hint?: RouteHint): Promise<Lease<H>> {
  for (;;) {
    const loaded = await ensureLoaded(s, modelId, signal, undefined, false);
    const spec = s.models.get(modelId);
    const picked = pickReplica(s, modelId);
    const h = (hint === undefined || picked === undefined ? undefined : preferredReplica(s, modelId, hint, picked.best)) ?? picked?.best ?? loaded;
    if (!routableNode(s, h)) {
      // Accounted, not routable: the node's fate is unknown until it is back or lost.
      const probe = s.o.agents.servesDuringOutage === undefined ? "" : " and the instance's backend does not answer the coordinator's health probe";
      throw new WardenError(Code.Unavailable, `model "${modelId}" is on node "${h.nodeId}", which is unreachable${probe}; retry later`, { details: { nodeId: h.nodeId } });
    }
    // Planted bug "route-to-stopping": the lookup neither waits for a stop holding the lifecycle lock nor skips a pending instance.
    const release = isPlanted("route-to-stopping") ? noop : s.locks.tryShared(h.incarnation);
    if (release === undefined) {
      // A stop holds (or waits for) this replica's lock: let it finish, then route again.
      (await s.locks.shared(h.incarnation, signal))();
      continue;
    }
    try {
      if (routable(s, h)) return leaseOn(s, modelId, spec, picked, h);
    } finally {
      release();
    }
  }
}

/**
 * {@link acquire} in the same turn, for the usual call: a routable replica is
 * ready, its lifecycle lock is free and nothing needs waiting for. Undefined
 * whenever acquire would wait, load, route again or refuse (an aborted call,
 * an unknown model, a full wait queue, an unreachable node): the caller then
 * takes acquire, which decides those cases. The lease is the one acquire
 * gives, without its promise turns (this runs on every routed call).
 */
export function acquireNow<H extends BackendHandle>(s: LoaderState<H>, modelId: string, signal: { readonly aborted: boolean }, hint?: RouteHint): Lease<H> | undefined {
  if (signal.aborted) return undefined;
  const spec = s.models.get(modelId);
  if (spec === undefined || (s.waiting.get(modelId) ?? 0) >= s.maxWaiting) return undefined;
  const picked = pickReplica(s, modelId);
  if (picked === undefined) return undefined;
  const h = (hint === undefined ? undefined : preferredReplica(s, modelId, hint, picked.best)) ?? picked.best;
  if (!routableNode(s, h)) return undefined;
  // The lookup and the lease are this one turn: whether the lock could be taken shared
  // is all a hold for the turn would tell (nothing can take or queue for it meanwhile).
  if (!isPlanted("route-to-stopping") && !s.locks.sharedFree(h.incarnation)) return undefined;
  return routable(s, h) ? leaseOn(s, modelId, spec, picked, h) : undefined;
}

/**
 * The lease on `h` (routable, its shared lock held by the caller for this
 * turn): may start a scale-up, starts tracking the call and tells `onCall`.
 */
function leaseOn<H extends BackendHandle>(s: LoaderState<H>, modelId: string, spec: ModelSpec | undefined, picked: { readonly inFlight: number } | undefined, h: HeldInstance<H>): Lease<H> {
  // The full picture only when a scale-up may start: the best replica at target and room for another (live + stopping = held replicas, + a load in admission).
  if (spec !== undefined && picked !== undefined && picked.inFlight >= spec.replicas.targetInFlight && s.replicas.count(modelId) < spec.replicas.max) maybeScaleUp(s, spec, chooseReplica(s, modelId));
  const address = h.address ?? "";
  const backend = h.backend ?? s.o.backends.connect(address, { nodeId: h.nodeId, model: h.model });
  h.backend = backend;
  if (h.placement === "remote-only") h.placement = "local-remote";
  const end = s.core.trackRequest(address);
  s.routes.touched(h.model, h.incarnation);
  const onCall = s.o.onCall;
  const startedMs = onCall === undefined ? 0 : s.o.clock.now();
  onCall?.({ model: h.model, incarnation: h.incarnation, nodeId: h.nodeId, inFlight: s.core.inFlight(address) });
  return new CallLease(s, h, address, backend, end, onCall, startedMs);
}

/**
 * A routed call's lease: a class with a prototype `complete` rather than an
 * object with a closure, as it is made on every routed call (and under tsx
 * each closure there also gets its name defined per call).
 */
class CallLease<H extends BackendHandle> implements Lease<H> {
  readonly incarnation: string;
  readonly nodeId: string;
  readonly model: string;
  private told = false;

  constructor(
    private readonly s: LoaderState<H>,
    h: HeldInstance<H>,
    readonly address: string,
    readonly backend: H,
    private readonly end: () => void,
    private readonly onCall: LoaderState<H>["o"]["onCall"],
    private readonly startedMs: number,
  ) {
    this.incarnation = h.incarnation;
    this.nodeId = h.nodeId;
    this.model = h.model;
  }

  // Run-once is the watchdog's (its end() ignores a second call): one owner of the
  // guard, so a double completion still reaches the rule it tests. A second
  // touched() re-reads the same figures and changes nothing.
  complete(): void {
    this.end();
    this.s.routes.touched(this.model, this.incarnation);
    // Once per call, whatever the number of completions (the observer counts calls).
    const onCall = this.onCall;
    if (onCall === undefined || this.told) return;
    this.told = true;
    onCall({ model: this.model, incarnation: this.incarnation, nodeId: this.nodeId, inFlight: this.s.core.inFlight(this.address), durationMs: this.s.o.clock.now() - this.startedMs });
  }
}

/**
 * Held, addressed and ready, with no stop in flight. Per routed call: the
 * state alone (O(1), no instance view built), where `stateOf` reads
 * "pending" while a stop is in flight. The planted bug routes to a ready
 * instance whatever is pending on it.
 */
function routable<H extends BackendHandle>(s: LoaderState<H>, h: HeldInstance<H>): boolean {
  if (s.held.get(h.incarnation) !== h || h.address === undefined) return false;
  if (isPlanted("route-to-stopping")) return s.core.instance(h.incarnation)?.state === "ready";
  return s.core.stateOf(h.incarnation) === "ready";
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
