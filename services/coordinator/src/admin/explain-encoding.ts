import { create, toBinary } from "@bufbuild/protobuf";
import { ExplainPlacementResponseSchema, NodeVerdictSchema, type ExplainPlacementResponse, type NodeVerdict } from "@warden/proto";
import { withEncoding } from "@warden/grpc";
import type { WorkSlicer } from "./work-slicer.js";

/**
 * Verdicts encoded per toBinary call: one call per verdict cost about five
 * times what one call for the whole answer did (each call sets up its own
 * writer), and a chunk of this many is still well under a slice's work.
 */
const chunkVerdicts = 256;

/** The answer's fields numbered before its nodes (field 4). */
export type ExplainHead = Pick<ExplainPlacementResponse, "decision" | "nodeId" | "reason">;
/** The answer's fields numbered after its nodes. */
export type ExplainTail = Partial<Pick<ExplainPlacementResponse, "nextPageToken" | "nodesTotal" | "nodesFit" | "nodesFitAfterEviction">>;

/**
 * The answer to ExplainPlacement with its bytes made a chunk of nodes at a
 * time (`verdictAt` gives the i-th of `nodeCount`), between the slicer's
 * slices. Written when the answer held every node's verdict (about 1.3 MB at
 * 10 000 nodes, about 20 ms to encode in one turn, as the server would after
 * the handler returns); a page now holds at most 1 000 (a few ms), and the
 * encoding still runs in the call's slices. The bytes are exactly what encoding the
 * whole message gives — the fields before the nodes (`head`), then each
 * chunk's verdicts as field 4, in order (a message holding only some of the
 * nodes encodes as just those entries), then the fields after them (`tail`)
 * — and the server sends them as they are (withEncoding).
 */
export async function encodedExplanation(head: ExplainHead, nodeCount: number, verdictAt: (i: number) => Omit<NodeVerdict, "$typeName">, slicer?: WorkSlicer, tail: ExplainTail = {}): Promise<Readonly<ExplainPlacementResponse>> {
  const nodes: NodeVerdict[] = [];
  const headBytes = toBinary(ExplainPlacementResponseSchema, create(ExplainPlacementResponseSchema, head));
  const parts: Uint8Array[] = [headBytes];
  let total = headBytes.length;
  for (let start = 0; start < nodeCount; start += chunkVerdicts) {
    if (slicer?.due() === true) await slicer.pause();
    const chunk: NodeVerdict[] = [];
    for (let i = start; i < Math.min(nodeCount, start + chunkVerdicts); i++) chunk.push(create(NodeVerdictSchema, verdictAt(i)));
    const bytes = toBinary(ExplainPlacementResponseSchema, create(ExplainPlacementResponseSchema, { nodes: chunk }));
    parts.push(bytes);
    total += bytes.length;
    for (const v of chunk) nodes.push(v);
  }
  // The fields numbered after the nodes come after them, as encoding the whole message places them.
  const tailBytes = toBinary(ExplainPlacementResponseSchema, create(ExplainPlacementResponseSchema, tail));
  parts.push(tailBytes);
  total += tailBytes.length;
  const all = new Uint8Array(total);
  let at = 0;
  for (const p of parts) {
    all.set(p, at);
    at += p.length;
  }
  return withEncoding(create(ExplainPlacementResponseSchema, { ...head, nodes, ...tail }), all);
}
