import { EvictionReason, type Event } from "@warden/proto";
import type { Cancel, Clock } from "@warden/common";
import type { BackendHandle, Lease, Loader, RouteHint } from "@warden/loader";
import type { NodeRecord } from "@warden/cluster";
import type { TraceLine } from "@warden/whatif";

/** Where taps send lines (TraceRecorder.record). */
export interface TraceSink {
  record(line: TraceLine): void;
}

/** "EVICTION_REASON_SCALE_DOWN" → "scale-down", as the watchdog names it. */
function reasonName(r: EvictionReason): string {
  // An unknown number (a newer peer) has no name: String(r) keeps it readable.
  return (EvictionReason[r] as string | undefined ?? String(r)).toLowerCase().replace(/_/g, "-");
}

/**
 * One audit event → at most one trace line: loads (model, node, load time),
 * completed evictions (reason), node joins and losses, operators' policy,
 * scale and node-limit changes. Nothing else of the event is kept (no
 * actor, no address, no error text).
 */
export function traceLineOf(e: Event, at: number): TraceLine | undefined {
  const p = e.payload;
  switch (p.case) {
    case "backendLoaded":
      return { t: "load", at, m: e.model, node: e.nodeId, loadMs: Number(p.value.loadDurationMs) };
    case "evictionStopped":
      return { t: "stop", at, m: e.model, node: e.nodeId, reason: reasonName(p.value.reason) };
    case "nodeRegistered":
      return { t: "node", at, node: e.nodeId, ev: "joined" };
    case "nodeUnreachable":
      return { t: "node", at, node: e.nodeId, ev: "unreachable" };
    case "nodeLost":
      return { t: "node", at, node: e.nodeId, ev: "lost" };
    case "policyUpdated":
      return { t: "admin", at, op: "policy", changes: p.value.changes.slice(0, 64) };
    case "replicaScaleSet":
      return { t: "admin", at, op: "scale", m: e.model, min: p.value.min, max: p.value.max };
    case "nodeLimitsSet":
      return { t: "admin", at, op: "limits", node: e.nodeId };
    default:
      return undefined;
  }
}

/**
 * Records every routed call: `acquire` is wrapped so each lease's wait
 * (arrival → instance) and hold (lease → complete) become one `call` line
 * when it completes; a call that got no instance is a line with ok=false.
 * Only the model name and times are kept — never the request or reply.
 * Every routed path (gRPC Inference, the Backend router, HTTP) takes its
 * lease through `loader.acquire`, so this one wrap sees them all.
 */
export function traceCalls<H extends BackendHandle>(loader: Loader<H>, clock: Clock, sink: TraceSink): void {
  const acquire = loader.acquire.bind(loader);
  // Every argument passes through (a route hint included): the wrap only records.
  loader.acquire = async (model: string, signal: AbortSignal, hint?: RouteHint): Promise<Lease<H>> => {
    const arrived = clock.now();
    const at = clock.wallNow();
    let lease: Lease<H>;
    try {
      lease = await acquire(model, signal, hint);
    } catch (err) {
      sink.record({ t: "call", at, m: model, waitMs: clock.now() - arrived, durMs: 0, ok: false });
      throw err;
    }
    const leased = clock.now();
    let done = false;
    // A lease is a plain object (routing.ts): the copy is the same lease with a recording complete.
    return {
      ...lease,
      complete: (): void => {
        // Completion is idempotent (DESIGN §3.1): the line is written once.
        if (!done) {
          done = true;
          sink.record({ t: "call", at, m: model, waitMs: leased - arrived, durMs: clock.now() - leased, ok: true });
        }
        lease.complete();
      },
    };
  };
}

/** What the memory sampler reads of the node table. */
export interface TracedNodes {
  list(): readonly Pick<NodeRecord<unknown>, "nodeId" | "resources">[];
}

/**
 * Every `intervalMs` one `mem` line per node with a reading (GPUs summed,
 * RAM without GPUs): rate-limited, proportional to the nodes, off the
 * heartbeat path.
 */
export function sampleNodeMemory(nodes: TracedNodes, clock: Clock, sink: TraceSink, intervalMs = 60_000): Cancel {
  let timer: Cancel | undefined;
  const sample = (): void => {
    const at = clock.wallNow();
    for (const n of nodes.list()) {
      const r = n.resources;
      if (r === undefined) continue;
      let totalBytes = Number(r.ramTotalBytes);
      let usedBytes = Number(r.ramUsedBytes);
      if (r.gpus.length > 0) {
        totalBytes = 0;
        usedBytes = 0;
        for (const g of r.gpus) {
          totalBytes += Number(g.totalBytes);
          usedBytes += Number(g.usedBytes);
        }
      }
      sink.record({ t: "mem", at, node: n.nodeId, totalBytes, usedBytes });
    }
    timer = clock.setTimer(intervalMs, sample);
  };
  // The first reading soon after the start: a short trace still names its nodes' memory.
  timer = clock.setTimer(Math.min(intervalMs, 5_000), sample);
  return () => timer?.();
}
