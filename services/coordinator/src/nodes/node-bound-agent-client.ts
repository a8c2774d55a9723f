import { WardenError } from "@warden/common";
import { lazyMethods, nodeMismatchOf } from "@warden/grpc";
import { AgentService } from "@warden/proto";
import type { AgentClient } from "./grpc-agent-connector.js";

/** The typed node-certificate refusal when `err` is one, else `err` as it came. */
function plain(err: unknown, nodeId: string, address: string): Error {
  const e = WardenError.from(err);
  return nodeMismatchOf(e, nodeId, address) ?? (err instanceof Error ? err : e);
}

async function* mapped(stream: AsyncIterable<unknown>, nodeId: string, address: string): AsyncGenerator {
  try {
    yield* stream;
  } catch (err) {
    throw plain(err, nodeId, address);
  }
}

/**
 * `client` (whose TLS checks every connection against node `nodeId`'s
 * certificate) with that check's refusal given back as PERMISSION_DENIED
 * naming the node and what the address presented: grpc-js reports a refused
 * handshake as UNAVAILABLE, which the loader would take for a passing
 * outage. Every other error passes unchanged.
 */
export function nodeBoundAgentClient(client: AgentClient, nodeId: string, address: string): AgentClient {
  const methods = client as unknown as Record<string, unknown>;
  return lazyMethods(AgentService, { close: methods["close"] }, (m) => {
    const name = m.localName;
    return (...args: unknown[]): unknown => {
      const r: unknown = (methods[name] as (...a: unknown[]) => unknown)(...args);
      if (r instanceof Promise) return r.catch((err: unknown) => Promise.reject(plain(err, nodeId, address)));
      if (typeof r === "object" && r !== null && Symbol.asyncIterator in r) return mapped(r as AsyncIterable<unknown>, nodeId, address);
      return r;
    };
  }) as AgentClient;
}
