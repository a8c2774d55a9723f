import { create, toBinary } from "@bufbuild/protobuf";
import { ExplainPlacementResponseSchema, NodeVerdictSchema, type ExplainPlacementResponse, type NodeVerdict } from "@warden/proto";
import { withEncoding } from "@warden/grpc";
import type { WorkSlicer } from "./work-slicer.js";

/** ExplainPlacementResponse.nodes: field 4, length-delimited. */
const nodesTag = (4 << 3) | 2;

/** The varint of `n` (a length: below 2^31). */
function varint(n: number): Uint8Array {
  const out: number[] = [];
  let v = n;
  while (v > 0x7f) {
    out.push((v & 0x7f) | 0x80);
    v >>>= 7;
  }
  out.push(v);
  return Uint8Array.from(out);
}

/**
 * The answer to ExplainPlacement with its bytes made node by node (`verdictAt`
 * gives the i-th of `nodeCount`), each node's verdict in the slicer's slices: at 10 000 nodes the whole answer is
 * about 1.3 MB, and encoding it in one go (as the server would, after the
 * handler returns) held the event loop for about 20 ms in one turn. The bytes
 * are exactly what encoding the whole message gives — the fields before the
 * nodes, then each verdict as its own length-delimited field 4, in order —
 * and the server sends them as they are (withEncoding).
 */
export async function encodedExplanation(head: Omit<ExplainPlacementResponse, "nodes" | "$typeName">, nodeCount: number, verdictAt: (i: number) => Omit<NodeVerdict, "$typeName">, slicer?: WorkSlicer): Promise<Readonly<ExplainPlacementResponse>> {
  const nodes: NodeVerdict[] = [];
  const headBytes = toBinary(ExplainPlacementResponseSchema, create(ExplainPlacementResponseSchema, head));
  const parts: Uint8Array[] = [headBytes];
  let total = headBytes.length;
  // Indexed: an array iterator in an async function allocates a result per step once it can await.
  for (let i = 0; i < nodeCount; i++) {
    if (slicer?.due() === true) await slicer.pause();
    const verdict = create(NodeVerdictSchema, verdictAt(i));
    const bytes = toBinary(NodeVerdictSchema, verdict);
    const prefix = varint(bytes.length);
    parts.push(Uint8Array.of(nodesTag), prefix, bytes);
    total += 1 + prefix.length + bytes.length;
    nodes.push(verdict);
  }
  const all = new Uint8Array(total);
  let at = 0;
  for (const p of parts) {
    all.set(p, at);
    at += p.length;
  }
  return withEncoding(create(ExplainPlacementResponseSchema, { ...head, nodes }), all);
}
