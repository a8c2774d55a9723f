/**
 * The routing benchmark's second floor: Warden's own lean gRPC server and lean
 * client passing each call's bytes to one backend and back, and nothing else —
 * no routing, lease, tracking, trace or counters. Against the bare forwarder
 * (bare-h2-forwarder.ts) it is what the lean transport costs; against the
 * coordinator's data plane, what the coordinator does per call on top of it.
 * Run as its own process: `node --import tsx lean-h2-forwarder.ts <listen-port> <backend host:port>`;
 * prints `listening <port>` when ready.
 */
import { LeanGrpcServer, createH2Client } from "@warden/grpc";
import { Backend } from "@warden/proto";

const [portArg, backend] = process.argv.slice(2);
if (portArg === undefined || backend === undefined) throw new Error("usage: lean-h2-forwarder <port> <backend host:port>");
const upstream = createH2Client(Backend, backend);
const server = new LeanGrpcServer().addRawService(Backend, {
  // The caller's cancellation passed on, as the data plane does (no AbortSignal per call).
  unary: (m) => (bytes, ctx) => upstream.unaryBytes(m, bytes, ctx.cancel === undefined ? { signal: ctx.signal } : { cancel: ctx.cancel }),
  serverStream: (m) => (bytes, ctx) => upstream.streamBytes(m, bytes, { signal: ctx.signal }),
  stream: (m) => (requests, ctx) => upstream.streamBytes(m, requests, { signal: ctx.signal }),
});
await server.listen(`127.0.0.1:${portArg}`);
process.stdout.write(`listening ${portArg}\n`);
process.on("SIGTERM", () => {
  upstream.close();
  process.exit(0);
});
