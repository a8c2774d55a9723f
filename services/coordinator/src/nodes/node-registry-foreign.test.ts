import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { ForeignProcessSchema, type AgentService, type ForeignProcess } from "@warden/proto";
import { ManualClock, nullLogger } from "@warden/common";
import type { Client } from "@warden/grpc";
import { NodeRegistry } from "./node-registry.js";

/** An agent client that is never called: WatchBackends idles until aborted, and any signal-sending call fails the test. */
function idleClient(): Client<typeof AgentService> {
  return {
    close() {},
    stopOrphan: () => {
      throw new Error("a foreign process must never be stopped");
    },
    watchBackends: (_req: unknown, opts?: { signal?: AbortSignal }) => ({
      [Symbol.asyncIterator]: () => ({
        next: () =>
          new Promise<IteratorResult<never>>((resolve) => {
            opts?.signal?.addEventListener("abort", () => {
              resolve({ done: true, value: undefined });
            }, { once: true });
          }),
      }),
    }),
  } as unknown as Client<typeof AgentService>;
}

const f = (pid: number, port: number): ForeignProcess => create(ForeignProcessSchema, { pid, address: `127.0.0.1:${String(port)}`, detail: "no Warden mark" });

describe("NodeRegistry foreign processes", () => {
  it("keeps each node's foreign list and reports only new ones, once per heartbeat (coalesced); never stops them", () => {
    const clock = new ManualClock();
    const calls: { nodeId: string; pids: number[] }[] = [];
    const r = new NodeRegistry({
      clock,
      log: nullLogger,
      graceMs: 5_000,
      orphanGraceMs: 1,
      connect: () => idleClient(),
      onNodeEvent: () => {},
      onForeign: (nodeId, fresh) => calls.push({ nodeId, pids: fresh.map((x) => x.pid) }),
    });
    r.register({ nodeId: "a", address: "127.0.0.1:1", labels: {}, gpus: [], bootEpoch: 1n });
    const beat = (sequence: bigint, foreign: ForeignProcess[]) => r.heartbeat({ nodeId: "a", bootEpoch: 1n, sequence, backends: [], orphans: [], foreign, resources: undefined });
    beat(1n, [f(10, 21000), f(11, 21001)]);
    expect(calls).toEqual([{ nodeId: "a", pids: [10, 11] }]);
    expect(r.get("a")?.foreign.map((x) => x.pid)).toEqual([10, 11]);
    clock.advance(10_000);
    beat(2n, [f(10, 21000), f(11, 21001)]); // nothing new: no call (and, past any grace, no stop)
    beat(3n, [f(11, 21001), f(12, 21002)]);
    expect(calls).toEqual([{ nodeId: "a", pids: [10, 11] }, { nodeId: "a", pids: [12] }]);
    beat(4n, []);
    expect(r.get("a")?.foreign).toEqual([]);
    beat(5n, [f(10, 21000)]); // gone and back: new again
    expect(calls.at(-1)).toEqual({ nodeId: "a", pids: [10] });
    // a heartbeat without the field (an older agent) clears the list
    r.heartbeat({ nodeId: "a", bootEpoch: 1n, sequence: 6n, backends: [], orphans: [], resources: undefined });
    expect(r.get("a")?.foreign).toEqual([]);
    r.close();
  });
});
