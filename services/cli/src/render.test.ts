import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { NodeSchema, NodeState } from "@warden/proto";
import { nodesTable } from "./render.js";

describe("nodes ls table", () => {
  it("counts each node's foreign processes (listeners Warden did not start) in a FOREIGN column", () => {
    const nodes = [
      create(NodeSchema, { nodeId: "a", state: NodeState.READY, foreign: [{ pid: 10, address: "127.0.0.1:21000", detail: "no Warden mark" }, { pid: 11, address: "127.0.0.1:21001", detail: "marked for node b" }] }),
      create(NodeSchema, { nodeId: "b", state: NodeState.READY }),
    ];
    const rows = nodesTable(nodes)
      .split("\n")
      .filter((l) => l.startsWith("│"))
      .map((l) => l.split("│").slice(1, -1).map((c) => c.trim()));
    const at = rows[0]?.indexOf("FOREIGN") ?? -1;
    expect(at).toBeGreaterThan(0);
    expect(rows.map((r) => [r[0], r[at]])).toEqual([["NODE", "FOREIGN"], ["a", "2"], ["b", "-"]]);
  });
});
