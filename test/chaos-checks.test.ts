/**
 * The chaos tests' checkers catch what they are for: each planted defect in a
 * view or an audit trail is reported (so a chaos test that passes is not
 * passing because its checker cannot fail).
 */
import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { EventSchema, EvictionFailedOutcome, EvictionFailedSchema, EvictionStartedSchema, EvictionStoppedSchema, InstanceState, LeftoverReapedSchema, NodeState, type Event } from "@warden/proto";
import { accountingProblems, auditProblems, convergenceProblems, dedupById, type ClusterView } from "./support/chaos-checks.js";

const GiB = 1n << 30n;
const row = (incarnation: string, o: Partial<ClusterView["rows"][number]> = {}): ClusterView["rows"][number] => ({ node: "a", incarnation, model: "m", state: InstanceState.READY, inFlight: 0, sizeBytes: GiB, pending: false, ...o });
const view = (o: Partial<ClusterView> = {}): ClusterView => ({
  rows: [row("I1")],
  nodes: [{ node: "a", state: NodeState.READY, instanceCount: 1, draining: false }],
  configuredSize: new Map([["m", GiB]]),
  running: [{ pid: 10, nodeId: "a", incarnation: "I1" }],
  ...o,
});

let n = 0;
function ev(incarnation: string, payload: Event["payload"], epoch = 1n, id = `E${String(++n)}`): Event {
  return create(EventSchema, { id, nodeId: "a", model: "m", incarnation, sequence: { epoch, n: BigInt(n) }, payload });
}
const started = (inc: string): Event => ev(inc, { case: "evictionStarted", value: create(EvictionStartedSchema) });
const stopped = (inc: string): Event => ev(inc, { case: "evictionStopped", value: create(EvictionStoppedSchema) });
const leftover = (inc: string): Event => ev(inc, { case: "evictionFailed", value: create(EvictionFailedSchema, { outcome: EvictionFailedOutcome.LEFTOVER }) });
const reaped = (inc: string): Event => ev(inc, { case: "leftoverReaped", value: create(LeftoverReapedSchema) });

describe("chaos checkers", () => {
  it("a converged view passes; a phantom, a lost backend, a leftover, in-flight, a short account, a wrong count and an unreachable node are each reported", () => {
    expect(convergenceProblems(view(), ["a"])).toEqual([]);
    const cases: [Partial<ClusterView>, RegExp][] = [
      [{ running: [], nodes: [{ node: "a", state: NodeState.READY, instanceCount: 0, draining: false }] }, /phantom/],
      [{ rows: [], nodes: [{ node: "a", state: NodeState.READY, instanceCount: 0, draining: false }] }, /lost backend/],
      [{ rows: [row("I1", { state: InstanceState.LEFTOVER })] }, /not ready/],
      [{ rows: [row("I1", { inFlight: 2 })] }, /in flight/],
      [{ rows: [row("I1", { sizeBytes: 1n })] }, /below/],
      [{ nodes: [{ node: "a", state: NodeState.READY, instanceCount: 2, draining: false }] }, /counts 2/],
      [{ nodes: [{ node: "a", state: NodeState.UNREACHABLE, instanceCount: 1, draining: false }] }, /not ready/],
      [{ nodes: [] }, /not listed/],
    ];
    for (const [o, re] of cases) expect(convergenceProblems(view(o), ["a"]).join("; ")).toMatch(re);
  });

  it("accounting during a fault accepts a leftover and reports a running process that is not accounted", () => {
    expect(accountingProblems(view({ rows: [row("I1", { state: InstanceState.LEFTOVER })] }))).toEqual([]);
    expect(accountingProblems(view({ rows: [] })).join()).toMatch(/amnesia/);
  });

  it("the audit checker reports a lost event, an unclosed or doubled eviction, a stop without a start, an unreaped leftover and events out of sequence; de-dup keeps the first copy", () => {
    const ok = [started("A"), stopped("A"), started("B"), leftover("B"), reaped("B")];
    expect(auditProblems(ok, ok.map((e) => ({ type: "x", id: e.id })))).toEqual([]);
    expect(auditProblems(ok, [{ type: "eviction.started", id: "missing" }]).join()).toMatch(/lost/);
    expect(auditProblems([started("C")], []).join()).toMatch(/never closed/);
    expect(auditProblems([started("D"), started("D"), stopped("D")], []).join()).toMatch(/single-flight/);
    expect(auditProblems([stopped("E")], []).join()).toMatch(/without an open/);
    expect(auditProblems([started("F"), leftover("F")], []).join()).toMatch(/never reaped/);
    const [s, t] = [started("G"), stopped("G")];
    expect(auditProblems([t, s], []).join()).toMatch(/after/);
    expect(auditProblems([ev("H", { case: "evictionStarted", value: create(EvictionStartedSchema) }, 2n), ev("H", { case: "evictionStopped", value: create(EvictionStoppedSchema) }, 1n)], []).join()).toMatch(/after/);
    const d = dedupById([s, t, s]);
    expect([d.events, d.duplicates]).toEqual([[s, t], 1]);
    expect(auditProblems([s, t, s], [])).toEqual([]);
  });
});
