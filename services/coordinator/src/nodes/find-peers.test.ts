import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { Code, ManualClock, WardenError } from "@warden/common";
import type { NodeRecord } from "@warden/cluster";
import type { HandlerContext } from "@warden/grpc";
import { FindPeersRequestSchema } from "@warden/proto";
import { PeerDirectory } from "./peer-directory.js";
import { findPeers, maxFindPeersDigests, maxOpenPeerGrantsPerNode, peerGrantHoldMs } from "./find-peers.js";

const sha = "a".repeat(64);

function node(nodeId: string, digests: readonly string[]): NodeRecord<unknown> {
  return { nodeId, state: "ready", embedded: false, address: `${nodeId}:7000`, artifactCache: { digests: new Set(digests) } } as unknown as NodeRecord<unknown>;
}

/** A holder of `sha` and three nodes without it, each with a peer key; one FindPeers state as a NodeService holds it. */
function setup(): { clock: ManualClock; call: (nodeId: string, digests: readonly string[]) => { first: Promise<string[][]>; end: () => void; done: Promise<void> } } {
  const clock = new ManualClock();
  const nodes = [node("holder", [sha]), node("r1", []), node("r2", []), node("r3", [])];
  const peers = new PeerDirectory({ clock, nodes: () => nodes, node: (id) => nodes.find((n) => n.nodeId === id) });
  for (const n of nodes) peers.setKey(n.nodeId, new Uint8Array(32).fill(7));
  const open = new Map<string, number>();
  const registered = (id: string): boolean => nodes.some((n) => n.nodeId === id);
  return {
    clock,
    call(nodeId, digests) {
      const ac = new AbortController();
      const it = findPeers(create(FindPeersRequestSchema, { nodeId, sha256: [...digests] }), { signal: ac.signal, peer: "127.0.0.1:1" } as HandlerContext, { peers, clock, registered, open });
      const first = it.next().then((r) => (r.done === true ? [] : (r.value.artifacts ?? []).map((a) => (a.peers ?? []).map((p) => p.nodeId ?? ""))));
      // The stream's end: the generator runs past its hold once the caller's signal aborts.
      const done = first.then(async () => { await it.next(); });
      done.catch(() => {}); // a refused call's refusal is read from `first`
      return { first, end: () => { ac.abort(); }, done };
    },
  };
}

async function refusal(p: Promise<unknown>): Promise<[Code, string, unknown]> {
  const e: unknown = await p.then(() => undefined, (x: unknown) => x);
  if (!(e instanceof WardenError)) throw new Error(`expected a WardenError, got ${String(e)}`);
  return [e.code, e.rawMessage, e.details.field];
}

describe("NodeService.FindPeers", () => {
  it("refuses a bad request whole, naming the field, and grants nothing", async () => {
    const s = setup();
    expect(await refusal(s.call("", [sha]).first)).toEqual([Code.InvalidArgument, "node_id: must be 1 to 128 characters", "node_id"]);
    expect(await refusal(s.call("n".repeat(129), [sha]).first)).toEqual([Code.InvalidArgument, "node_id: must be 1 to 128 characters", "node_id"]);
    expect(await refusal(s.call("r1", []).first)).toEqual([Code.InvalidArgument, "sha256: must name 1 to 128 digests, got 0", "sha256"]);
    const many = Array.from({ length: maxFindPeersDigests + 1 }, (_, i) => i.toString(16).padStart(64, "0"));
    expect(await refusal(s.call("r1", many).first)).toEqual([Code.InvalidArgument, "sha256: must name 1 to 128 digests, got 129", "sha256"]);
    expect(await refusal(s.call("r1", [sha, "A".repeat(64)]).first)).toEqual([Code.InvalidArgument, `sha256[1]: must be 64 lowercase hex characters, got "${"A".repeat(64)}"`, "sha256[1]"]);
    expect(await refusal(s.call("r1", [sha, "b".repeat(64), sha]).first)).toEqual([Code.InvalidArgument, "sha256[2]: repeats sha256[0]", "sha256[2]"]);
    expect(await refusal(s.call("stranger", [sha]).first)).toEqual([Code.FailedPrecondition, 'node_id: "stranger" is not registered with this coordinator; Register first', "node_id"]);
    // None of the refusals took a slot: the holder serves two callers now, as fan-out 2 allows.
    const a = s.call("r1", [sha]);
    const b = s.call("r2", [sha]);
    expect([await a.first, await b.first]).toEqual([[["holder"]], [["holder"]]]);
    a.end();
    b.end();
    await Promise.all([a.done, b.done]);
  });

  it("names each digest's peer as for a start, and frees the slots when the caller ends the call", async () => {
    const s = setup();
    const other = "c".repeat(64);
    const a = s.call("r1", [sha, other]);
    const b = s.call("r2", [sha]);
    // The digest nobody holds or pulls: no peer (the origin); the holder is asked by two at once.
    expect(await a.first).toEqual([["holder"], []]);
    expect(await b.first).toEqual([["holder"]]);
    // The holder's two slots are taken: the third reads from a node pulling it now (r1).
    const c = s.call("r3", [sha]);
    expect(await c.first).toEqual([["r1"]]);
    c.end();
    a.end();
    b.end();
    await Promise.all([a.done, b.done, c.done]);
    const again = s.call("r3", [sha]);
    expect(await again.first).toEqual([["holder"]]);
    again.end();
    await again.done;
  });

  it("ends a call held past its bound (the slots are freed) and caps the calls one node holds open", async () => {
    const s = setup();
    const held = Array.from({ length: maxOpenPeerGrantsPerNode }, () => s.call("r1", ["d".repeat(64)]));
    for (const h of held) await h.first;
    expect(await refusal(s.call("r1", ["d".repeat(64)]).first)).toEqual([Code.ResourceExhausted, `node_id: "r1" holds ${String(maxOpenPeerGrantsPerNode)} FindPeers open already; pull from the origin`, "node_id"]);
    // Another node is not held back by r1's calls.
    const r2 = s.call("r2", [sha]);
    expect(await r2.first).toEqual([["holder"]]);
    s.clock.advance(peerGrantHoldMs);
    await Promise.all([...held.map((h) => h.done), r2.done]);
    const next = s.call("r1", [sha]);
    expect(await next.first).toEqual([["holder"]]);
    next.end();
    await next.done;
  });
});
