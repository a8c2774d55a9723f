import { Code, WardenError } from "@warden/common";
import { createClient, type Client, type CreateClientOptions } from "@warden/grpc";
import { ArtifactStoreService } from "@warden/proto";
import type { StoreChunk, StoreReader } from "./artifact-sources.js";

/** Codes after which the next coordinator is tried: it is not there, or not the one serving (a standby answers UNIMPLEMENTED). */
const tryNext = new Set<Code>([Code.Unavailable, Code.Unimplemented, Code.FailedPrecondition, Code.DeadlineExceeded]);

/**
 * The coordinators' artifact store (ArtifactStoreService.ReadArtifact) with the
 * agent's node credentials: the same TLS and node token as its Register and
 * Heartbeat. Each read tries the coordinators in `--coordinator` order until
 * one sends a first chunk; a later failure is the pull's (it resumes from
 * its partial on the next start).
 */
export function coordinatorStoreReader(o: { readonly addresses: readonly string[]; readonly nodeId: string; readonly clientOptions: CreateClientOptions }): { reader: StoreReader; close(): void } {
  const clients = new Map<string, Client<typeof ArtifactStoreService>>();
  const clientFor = (address: string): Client<typeof ArtifactStoreService> => {
    let c = clients.get(address);
    if (c === undefined) {
      c = createClient(ArtifactStoreService, address, o.clientOptions);
      clients.set(address, c);
    }
    return c;
  };
  async function* read(path: string, offset: number, signal: AbortSignal): AsyncGenerator<StoreChunk> {
    let last: WardenError | undefined;
    for (const address of o.addresses) {
      const it = clientFor(address).readArtifact({ nodeId: o.nodeId, path, offset: BigInt(offset) }, { signal })[Symbol.asyncIterator]();
      let first: IteratorResult<StoreChunk>;
      try {
        first = await it.next();
      } catch (err) {
        const e = WardenError.from(err);
        if (signal.aborted || !tryNext.has(e.code)) throw e;
        last = new WardenError(e.code, `${address}: ${e.rawMessage}`);
        continue;
      }
      if (first.done === true) return;
      yield first.value;
      for (;;) {
        const n = await it.next();
        if (n.done === true) return;
        yield n.value;
      }
    }
    throw last ?? new WardenError(Code.Unavailable, "no coordinator address");
  }
  return {
    reader: read,
    close() {
      for (const c of clients.values()) c.close();
      clients.clear();
    },
  };
}
