/**
 * The swarm benchmark's baseline, run as its own process: a bare grpc-js
 * server with the NodeService definition that decodes each Register and
 * Heartbeat (unary or on a HeartbeatStream) and answers — no validation, no registry, no auth. What any
 * coordinator pays at least for the same heartbeats (the transport floor).
 * Sends {t:"listening", address} over IPC; {t:"stop"} ends it; {t:"loop"} answers
 * {t:"loop", p99Ms}: its event-loop delay p99 since the last ask, measured as the
 * coordinator's is (monitorEventLoopDelay, 10 ms resolution, one window per ask) — the
 * loop delay a process doing almost nothing per heartbeat sees on the same machine.
 */
import { monitorEventLoopDelay } from "node:perf_hooks";
import { Server, ServerCredentials, type sendUnaryData, type ServerDuplexStream, type ServerUnaryCall } from "@grpc/grpc-js";
import { create } from "@bufbuild/protobuf";
import { grpcServiceDefinition } from "@warden/grpc";
import { HeartbeatResponseSchema, NodeService, RegisterResponseSchema, type HeartbeatRequest, type RegisterRequest } from "@warden/proto";

const server = new Server();
let heartbeats = 0;
const loopDelay = monitorEventLoopDelay({ resolution: 10 });
loopDelay.enable();
server.addService(grpcServiceDefinition(NodeService), {
  register(_call: ServerUnaryCall<RegisterRequest, unknown>, cb: sendUnaryData<unknown>) {
    cb(null, create(RegisterResponseSchema, { coordinatorEpoch: 1n, heartbeatIntervalMs: 1_000 }));
  },
  heartbeat(call: ServerUnaryCall<HeartbeatRequest, unknown>, cb: sendUnaryData<unknown>) {
    if (call.request.nodeId !== "") heartbeats++;
    cb(null, create(HeartbeatResponseSchema, { registerRequired: false, coordinatorEpoch: 1n }));
  },
  // The same answers on each agent's stream (the swarm's `--heartbeat stream`).
  heartbeatStream(call: ServerDuplexStream<HeartbeatRequest, unknown>) {
    call.on("data", (req: HeartbeatRequest) => {
      if (req.nodeId !== "") heartbeats++;
      call.write(create(HeartbeatResponseSchema, { registerRequired: false, coordinatorEpoch: 1n }));
    });
    call.on("end", () => call.end());
    call.on("error", () => undefined);
  },
});
server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (err, port) => {
  if (err !== null) {
    process.stderr.write(`swarm-floor: ${err.message}\n`);
    process.exit(1);
  }
  process.send?.({ t: "listening", address: `127.0.0.1:${String(port)}` });
});
process.on("disconnect", () => process.exit(1));
process.on("message", (m: { t: string }) => {
  if (m.t === "loop") {
    process.send?.({ t: "loop", p99Ms: loopDelay.percentile(99) / 1e6 });
    loopDelay.reset();
  }
  if (m.t === "stop") {
    process.stderr.write(`swarm-floor: ${String(heartbeats)} heartbeats answered\n`);
    server.tryShutdown(() => process.exit(0));
  }
});
