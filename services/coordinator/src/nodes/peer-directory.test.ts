import { describe, expect, it } from "vitest";
import type { NodeRecord } from "@warden/cluster";
import { parseCoordinatorConfig } from "../config/coordinator-config.js";
import { PeerDirectory } from "./peer-directory.js";

const sha = "a".repeat(64);
const clock = { now: () => 1_000, wallNow: () => 1_700_000_000_000 };

function node(nodeId: string, digests: readonly string[]): NodeRecord<unknown> {
  return { nodeId, state: "ready", embedded: false, address: `${nodeId}:7000`, artifactCache: { digests: new Set(digests) } } as unknown as NodeRecord<unknown>;
}

function directory(enabled?: boolean): PeerDirectory {
  const nodes = [node("holder", [sha]), node("requester", [])];
  const d = new PeerDirectory({ clock: clock as never, nodes: () => nodes, node: (id) => nodes.find((n) => n.nodeId === id), ...(enabled === undefined ? {} : { enabled }) });
  for (const n of nodes) d.setKey(n.nodeId, new Uint8Array(32).fill(7));
  return d;
}

describe("PeerDirectory", () => {
  it("names the node that holds a digest, with a ticket, by default", () => {
    const g = directory().grant("requester", [{ sha256: sha }]);
    expect(g.peers.get(sha)?.map((p) => p.nodeId)).toEqual(["holder"]);
    expect(g.peers.get(sha)?.[0]?.ticket).toMatch(/^[0-9a-f]{64}$/);
    g.release();
  });

  it("with peerFetch off names no peer: every pull is from its origin", () => {
    const g = directory(false).grant("requester", [{ sha256: sha }]);
    expect(g.peers.size).toBe(0);
    g.release();
  });

  it("config peerFetch: on by default, false turns it off, anything else is refused naming the key", () => {
    expect(parseCoordinatorConfig("listen: 127.0.0.1:1\n").peerFetch).toBe(true);
    expect(parseCoordinatorConfig("peerFetch: false\n").peerFetch).toBe(false);
    expect(() => parseCoordinatorConfig("peerFetch: sometimes\n")).toThrow(/peerFetch/);
  });
});
