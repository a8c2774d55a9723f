import type { MessageInitShape } from "@bufbuild/protobuf";
import { PlacementDecision, type ExplainPlacementResponseSchema } from "@warden/proto";
import type { ModelSpec, ReplicaStatus } from "@warden/loader";
import type { InstanceView, WatchdogCore } from "@warden/watchdog";
import { invalidArgument } from "@warden/common";
import type { ExplainPage } from "@warden/cluster";
import type { PlacementView } from "./placement-view.js";
import { WorkSlicer, type WorkSlicerOptions } from "./work-slicer.js";
import { encodedExplanation } from "./explain-encoding.js";
import { checkNodeIdPrefix, decodePageToken, encodePageToken, maxPageSize } from "./listing-page.js";

type ExplainInit = MessageInitShape<typeof ExplainPlacementResponseSchema>;

export interface ExplainPlacementDeps {
  readonly core: Pick<WatchdogCore, "instancesOfModel">;
  readonly placement: Pick<PlacementView, "explainPlan"> & Partial<Pick<PlacementView, "anyNodeReady">>;
  /** Monotonic now, for the scale-up circuit breaker's next attempt. */
  readonly nowMs: number;
  /**
   * The caller's deadline or cancel, how long a slice of work may run before
   * yielding, and the clock that measures it. Between nodes the explanation
   * stops once the signal aborts and yields once a slice has run.
   */
  readonly slicing?: WorkSlicerOptions;
}

/** A replica that counts toward `replicas.max`: reserved, loading or ready, not being stopped (leftovers aside). */
function counts(v: InstanceView): boolean {
  return v.pendingEviction === undefined && (v.state === "ready" || v.state === "loading" || v.state === "reserved");
}

function describeInstance(v: InstanceView): string {
  const state = v.pendingEviction !== undefined ? "pending eviction" : v.state;
  return `node "${v.nodeId}" (${state}${v.gpu === undefined ? "" : `, gpu ${String(v.gpu)}`})`;
}

function describeBlocked(blocked: ReplicaStatus["blocked"], nowMs: number): string {
  if (blocked === undefined) return "";
  return `; scale-up blocked after ${String(blocked.failures)} failure(s) (${blocked.error}), next attempt in ${String(Math.max(0, blocked.retryAtMs - nowMs))} ms`;
}

/** Verdicts an answer lists when the request leaves page_size at 0: the decision and the counts weigh every node whatever the page. */
export const defaultExplainPageSize = 100;

/** Which verdicts a request asks for, checked whole (page_size, node_id_prefix, page_token) before anything is read; `filters` is what its tokens carry. */
export interface ExplainPageAsk extends ExplainPage {
  readonly filters: string;
}

export function explainPageOf(req: { readonly model: string; readonly pageSize: number; readonly pageToken: string; readonly nodeIdPrefix: string }): ExplainPageAsk {
  if (req.pageSize > maxPageSize) throw invalidArgument("page_size", `at most ${String(maxPageSize)}, got ${String(req.pageSize)}`);
  checkNodeIdPrefix(req.nodeIdPrefix);
  // A token is good for the model and prefix it was issued for (one of another listing is refused the same way).
  const filters = JSON.stringify(["explain", req.model, req.nodeIdPrefix]);
  const after = decodePageToken(req.pageToken, filters);
  if (after?.m !== undefined) throw invalidArgument("page_token", "is not a token this listing issued (pass the next_page_token of the previous page, unchanged)");
  return { size: req.pageSize === 0 ? defaultExplainPageSize : req.pageSize, nodeIdPrefix: req.nodeIdPrefix, filters, ...(after === undefined ? {} : { afterNodeId: after.n }) };
}

/**
 * ExplainPlacement for the model's NEXT replica. At `replicas.max`
 * (ready + loading + reserved, leftovers and replicas being stopped aside) it
 * answers ALREADY_LOADED with every replica's node; below it, the plan the
 * next load would take (through the same `plan` as the loader's `choose`),
 * with what it would evict, the replicas that exist, and the scale-up circuit
 * breaker when open. Until admin.proto carries the counts, they are in
 * `reason`. The first replica's explanation is unchanged.
 *
 * The verdicts listed are one page of the nodes (`page`: 100 from the first
 * by default); the decision and the counts (nodes weighed, fitting now,
 * fitting after eviction) weigh every node. Linear in nodes + instances:
 * each node's records are read once, a listed node's candidate and its
 * evictions together (`explainPlan`), and only the page's verdicts get
 * reasons. Rejects with the signal's reason (CANCELLED, DEADLINE_EXCEEDED)
 * once the caller is gone.
 */
export async function explainPlacement(d: ExplainPlacementDeps, spec: ModelSpec, blocked?: ReplicaStatus["blocked"], page: ExplainPageAsk = explainPageOf({ model: spec.id, pageSize: 0, pageToken: "", nodeIdPrefix: "" })): Promise<ExplainInit> {
  const all = d.core.instancesOfModel(spec.id);
  const live = all.filter(counts);
  // Validated to at least 1 (replicaBounds); a 0 here would read as "at max" with nothing loaded.
  const max = Math.max(1, spec.replicas.max);
  const breaker = describeBlocked(blocked, d.nowMs);
  if (live.length >= max) {
    return {
      decision: PlacementDecision.ALREADY_LOADED,
      nodeId: live[0]?.nodeId ?? "",
      reason: `already at max replicas (${String(live.length)}/${String(max)}): on ${live.map(describeInstance).join(", ")}`,
      nodes: [],
    };
  }
  const others = all.filter((v) => !counts(v));
  const prefix =
    all.length === 0
      ? ""
      : `next replica (${String(live.length + 1)} of max ${String(max)}; ${live.length === 0 ? "none counted" : `${String(live.length)} on ${live.map(describeInstance).join(", ")}`}${others.length === 0 ? "" : `; not counted: ${others.map(describeInstance).join(", ")}`}): `;
  const slicer = d.slicing === undefined ? undefined : new WorkSlicer(d.slicing);
  const { plan, listed, evictions, counts: n, moreAfter } = await d.placement.explainPlan(spec, page, slicer);
  // A listed node's evictions were read with its candidate, in the same slice: the answer for a node is one reading of it.
  const verdictAt = (i: number): { nodeId: string; fits: boolean; reason: string; freeBytes: bigint; score: number; wouldEvict: string[] } => {
    const v = listed[i] as (typeof listed)[number];
    return { nodeId: v.nodeId, fits: v.fits, reason: v.reason, freeBytes: BigInt(Math.round(v.freeBytes)), score: v.score, wouldEvict: evictions.get(v.nodeId)?.slice() ?? [] };
  };
  const reason = `${prefix}${plan.reason}${breaker}`;
  const tail = { nextPageToken: moreAfter === undefined ? "" : encodePageToken(page.filters, { n: moreAfter }), nodesTotal: n.total, nodesFit: n.fit, nodesFitAfterEviction: n.fitAfterEviction };
  // Made and encoded a chunk of verdicts at a time in the same slices (explain-encoding.ts): the answer's bytes are made here, not in one turn by the server.
  const answer = (decision: PlacementDecision, nodeId: string): Promise<ExplainInit> => encodedExplanation({ decision, nodeId, reason }, listed.length, verdictAt, slicer, tail);
  switch (plan.t) {
    case "place":
      return await answer(PlacementDecision.PLACE, plan.nodeId);
    case "evict-then-place":
      return await answer(PlacementDecision.EVICT_THEN_PLACE, plan.nodeId);
    case "no-fit": {
      // WAIT, not NO_FIT, when no node is ready (none registered yet, or all unreachable, as while a
      // new leader's agents re-register): nothing judged the model, and `warden predict` gives up on NO_FIT.
      // So is a node the model could use but for a state that ends (draining, unreachable): the load's admission waits for it too.
      // And an eligible node whose room eviction cannot make now (busy, loading or pinned instances fill its slots,
      // a group conflict it cannot resolve yet): a load is handed that node and waits for the room (placement-view.ts).
      const transient = d.placement.anyNodeReady?.() === false || plan.verdicts.some((v) => v.waitable === true || v.eligible);
      return await answer(transient ? PlacementDecision.WAIT : PlacementDecision.NO_FIT, "");
    }
  }
}
