import { describe, expect, it } from "vitest";
import { Code, WardenError } from "@warden/common";
import { nodeMismatchMarker } from "@warden/grpc";
import { nodeBoundAgentClient } from "./node-bound-agent-client.js";
import type { AgentClient } from "./grpc-agent-connector.js";

/** What grpc-js reports when the node-certificate check refused the handshake. */
const refusedHandshake = new WardenError(Code.Unavailable, `No connection established. Last error: Error: ${nodeMismatchMarker} node "gpu-1": the agent at 127.0.0.1:7443 presents a certificate issued to node "gpu-2", not node "gpu-1"'s; refusing to command it`);

async function caught(p: Promise<unknown>): Promise<WardenError> {
  return p.then(
    () => {
      throw new Error("expected a rejection");
    },
    (e: unknown) => e as WardenError,
  );
}

describe("nodeBoundAgentClient", () => {
  const client = (err: WardenError): AgentClient =>
    ({
      listBackends: () => Promise.reject(err),
      watchBackends: () => ({
        [Symbol.asyncIterator]: () => ({ next: () => Promise.reject(err) }),
      }),
      close: () => {},
    }) as unknown as AgentClient;

  it("gives a refused handshake back as PERMISSION_DENIED naming both nodes, on unary and streaming calls", async () => {
    const c = nodeBoundAgentClient(client(refusedHandshake), "gpu-1", "127.0.0.1:7443");
    const unary = await caught(c.listBackends({}));
    expect(unary.code).toBe(Code.PermissionDenied);
    expect(unary.rawMessage).toBe(`node "gpu-1": the agent at 127.0.0.1:7443 presents a certificate issued to node "gpu-2", not node "gpu-1"'s; refusing to command it`);
    expect(unary.details).toMatchObject({ field: "node_id", nodeId: "gpu-1" });
    const streamed = await caught((async () => {
      for await (const _ of c.watchBackends({})) break;
    })());
    expect(streamed.code).toBe(Code.PermissionDenied);
  });

  it("passes every other error as it came", async () => {
    const down = new WardenError(Code.Unavailable, "No connection established. Last error: connect ECONNREFUSED");
    const c = nodeBoundAgentClient(client(down), "gpu-1", "127.0.0.1:7443");
    expect(await caught(c.listBackends({}))).toBe(down);
  });
});
