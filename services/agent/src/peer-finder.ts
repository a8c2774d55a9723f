import { Code, WardenError, abortReason, codeName, type Clock, type Logger } from "@warden/common";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { FindPeersRequestSchema, FindPeersResponse } from "@warden/proto";
import { checkPeers, type PeerSpec } from "./peer-source.js";
import { isAborted } from "./is-aborted.js";

/** Peers to fetch digests from, held until `release` (the coordinator frees their slots then). */
export interface PeerLease {
  readonly peers: ReadonlyMap<string, readonly PeerSpec[]>;
  release(): void;
}

/**
 * Asks for peers of digests the agent is about to pull that no start named
 * (a backend bundle's layers or tarball). Never fails for want of peers: any
 * failure is an empty lease (the origin serves the pull); only the caller's
 * own abort rejects.
 */
export type PeerFinder = (digests: readonly string[], signal: AbortSignal) => Promise<PeerLease>;

export const noPeers: PeerLease = { peers: new Map(), release: () => {} };

/** How long the agent waits for the coordinator's answer before it pulls from the origin instead. */
export const peerAnswerWaitMs = 5_000;

/** NodeService.FindPeers as a call (the leader-following client's method, or a test's fake). */
export type FindPeersCall = (request: MessageInitShape<typeof FindPeersRequestSchema>, options: { readonly signal: AbortSignal }) => AsyncIterable<FindPeersResponse>;

/**
 * A PeerFinder over the coordinator's NodeService.FindPeers
 * (docs/artifacts.md, "Peer-to-peer fetch"): the first message names each
 * digest's peers; the call then stays open until `release`, which ends it.
 * A coordinator without the method (UNIMPLEMENTED), one that is down or
 * refuses, an answer that is late (after {@link peerAnswerWaitMs}) or
 * malformed (peers outside the bounds a start's are checked against, a
 * digest not asked): no peers, logged once per pull.
 */
export function coordinatorPeerFinder(o: { readonly nodeId: string; readonly call: FindPeersCall; readonly clock: Clock; readonly logger: Logger }): PeerFinder {
  const log = o.logger.child({ component: "peer-finder" });
  return async (digests, signal) => {
    if (digests.length === 0) return noPeers;
    if (signal.aborted) throw abortReason(signal);
    const ac = new AbortController();
    const onAbort = (): void => {
      ac.abort(signal.reason);
    };
    signal.addEventListener("abort", onAbort, { once: true });
    const cancelWait = o.clock.setTimer(peerAnswerWaitMs, () => {
      ac.abort(new WardenError(Code.DeadlineExceeded, `the coordinator did not answer FindPeers within ${String(peerAnswerWaitMs)} ms`));
    });
    const end = (): void => {
      cancelWait();
      signal.removeEventListener("abort", onAbort);
      ac.abort(new WardenError(Code.Canceled, "the pull ended"));
    };
    const it = o.call({ nodeId: o.nodeId, sha256: [...digests] }, { signal: ac.signal })[Symbol.asyncIterator]();
    try {
      const first = await it.next();
      cancelWait();
      if (first.done === true) throw new WardenError(Code.Unavailable, "FindPeers ended without an answer");
      const peers = new Map<string, readonly PeerSpec[]>();
      for (const [i, a] of first.value.artifacts.entries()) {
        if (!digests.includes(a.sha256)) throw new WardenError(Code.Internal, `FindPeers answered for sha256 ${a.sha256.slice(0, 64)}, which was not asked`);
        peers.set(a.sha256, checkPeers(`artifacts[${String(i)}].peers`, a.peers));
      }
      // Read on so the call's end is seen; the peers' slots are held until release() ends it.
      void (async () => {
        try {
          while ((await it.next()).done !== true);
        } catch {
          // ended by release(), or the coordinator went away: the tickets in hand still work
        }
      })();
      let released = false;
      return {
        peers,
        release: () => {
          if (released) return;
          released = true;
          end();
        },
      };
    } catch (err) {
      // The wait's own deadline is the reason, not the cancel error the call ended with.
      const e = ac.signal.aborted ? abortReason(ac.signal) : WardenError.from(err);
      end();
      await it.return?.().catch(() => undefined);
      if (isAborted(signal)) throw abortReason(signal);
      log.info("no peers for a pull: the origin serves it", { digests: digests.length, code: codeName(e.code), err: e.rawMessage });
      return noPeers;
    }
  };
}
