/**
 * `npm start`: the coordinator. Today it serves gRPC health and reflection;
 * the control plane is wired in as the watchdog, agent and loader land.
 */
import { parseArgs } from "node:util";
import { GrpcServer } from "@warden/grpc";
import { createLogger } from "@warden/common";

const { values } = parseArgs({
  options: {
    listen: { type: "string", default: "127.0.0.1:50051" },
    help: { type: "boolean", short: "h", default: false },
  },
});
if (values.help) {
  process.stdout.write("usage: warden coordinator [--listen host:port]\n\n  --listen   address of the Admin/Inference gRPC server (default 127.0.0.1:50051)\n");
  process.exit(0);
}
const log = createLogger({ name: "coordinator" });
const server = new GrpcServer();
const { address } = await server.listen(values.listen);
log.info("coordinator listening", { address });
process.stdout.write(`Warden coordinator listening on ${address} (gRPC health and reflection)\n`);
const stop = (): void => {
  log.info("shutting down");
  void server.shutdown(2000).then(() => process.exit(0));
};
process.on("SIGINT", stop);
process.on("SIGTERM", stop);
