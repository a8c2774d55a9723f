/**
 * The swarm floor's twin on Warden's own gRPC server (GrpcServer: its
 * handler wrapper, metadata guard, call context): the NodeService decodes
 * each Register and Heartbeat and answers — no validation, no registry, no
 * auth. Beside the bare grpc-js floor (swarm-floor.ts) in the same run it
 * measures what the server layer adds per heartbeat. Sends
 * {t:"listening", address} over IPC; {t:"stop"} ends it.
 */
import { GrpcServer, defaultPeerCaps } from "@warden/grpc";
import { NodeService } from "@warden/proto";

// The generator dials up to 256 connections from 127.0.0.1.
const server = new GrpcServer({ peerCaps: { ...defaultPeerCaps, maxConnectionsPerPeer: 1_024 } });
let heartbeats = 0;
server.add(NodeService, {
  register: async () => ({ coordinatorEpoch: 1n, heartbeatIntervalMs: 1_000 }),
  heartbeat: async (req) => {
    if (req.nodeId !== "") heartbeats++;
    return { registerRequired: false, coordinatorEpoch: 1n };
  },
  heartbeatStream: async function* (requests) {
    for await (const req of requests) {
      if (req.nodeId !== "") heartbeats++;
      yield { registerRequired: false, coordinatorEpoch: 1n };
    }
  },
  // Never asked by the swarm's agents: they install no bundles.
  findPeers: async function* () {
    yield { artifacts: [] };
  },
});
server.listen("127.0.0.1:0").then(
  ({ address }) => process.send?.({ t: "listening", address }),
  (err: unknown) => {
    process.stderr.write(`swarm-wrapped: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
process.on("disconnect", () => process.exit(1));
process.on("message", (m: { t: string }) => {
  if (m.t === "stop") {
    process.stderr.write(`swarm-wrapped: ${String(heartbeats)} heartbeats answered\n`);
    void server.shutdown(1_000).finally(() => process.exit(0));
  }
});
