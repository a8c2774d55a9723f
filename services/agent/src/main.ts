import { readFile } from "node:fs/promises";
import { WardenError, createLogger } from "@warden/common";
import { GrpcServer, createClient } from "@warden/grpc";
import { AgentService, NodeService } from "@warden/proto";
import { agentUsage, parseAgentArgs } from "./agent-args.js";
import { parseAgentConfig } from "./agent-config.js";
import { createAgent } from "./agent.js";
import { builtinCatalog } from "./backend-sim-catalog.js";
import { createNodeHeartbeat, type NodeHeartbeat } from "./node-heartbeat.js";
import { createAgentMetrics } from "./agent-metrics.js";
import { servePrometheus } from "./prometheus-server.js";

// `node --import tsx services/agent/src/main.ts --config agent.yaml ...` (one pid:
// stack.md G10). Exit behaviour (DESIGN §2): on SIGTERM/SIGINT the backends keep
// running and the next agent adopts them, unless --stop-backends-on-exit.

async function main(): Promise<number> {
  let args;
  try {
    args = parseAgentArgs(process.argv.slice(2));
  } catch (err) {
    process.stderr.write(`${WardenError.from(err).rawMessage}\n\n${agentUsage}`);
    return 2;
  }
  if (args.help) {
    process.stdout.write(agentUsage);
    return 0;
  }
  let config;
  try {
    config = parseAgentConfig(await readFile(args.configPath, "utf8"), builtinCatalog);
  } catch (err) {
    process.stderr.write(`config ${args.configPath}: ${WardenError.from(err).rawMessage}\n`);
    return 2;
  }
  const listen = args.listen ?? config.listen;
  if (args.checkConfig) {
    const catalog = Object.entries(config.catalog).map(([name, e]) => `${name} (${[e.command, ...e.args].join(" ")})`);
    process.stdout.write(
      `config ${args.configPath}: valid\n  nodeId      ${config.nodeId}\n  listen      ${listen} (advertised ${config.advertiseAddress})\n  stateDir    ${config.stateDir}\n` +
        `  ports       ${String(config.portMin)}–${String(config.portMax)} on ${config.backendHost}\n  gpus        ${config.gpus.join(",") || "-"} (nvidia-smi: ${config.nvidiaSmiPath || "off"})\n  labels      ${Object.entries(config.labels).map(([k, v]) => `${k}=${v}`).join(",") || "-"}\n  catalog     ${catalog.join("; ")}\n`,
    );
    return 0;
  }
  const logger = createLogger({ name: "agent", level: process.env.LOG_LEVEL ?? "info" });
  const agent = createAgent(config, { logger });
  const report = await agent.start();
  logger.info("state dir adopted", { adopted: report.adopted, forgotten: report.forgotten, stoppedUnfinished: report.stoppedUnfinished, orphans: report.orphans.length });
  const l = config.limits;
  const server = new GrpcServer({ maxReceiveMessageBytes: l.maxMessageBytes, maxSendMessageBytes: l.maxMessageBytes, maxMetadataBytes: l.maxMetadataBytes, maxConcurrentStreams: l.maxStreamsPerConnection });
  server.add(AgentService, agent.service);
  const { address } = await server.listen(listen);
  logger.info("agent listening", { address, nodeId: config.nodeId, pid: process.pid });

  const metricsServer = args.metrics === undefined ? undefined : (await servePrometheus(createAgentMetrics(agent), args.metrics)).server;
  if (args.metrics !== undefined) logger.info("metrics listening", { address: args.metrics });
  let heartbeat: NodeHeartbeat | undefined;
  if (args.coordinator !== undefined) {
    const node = createClient(NodeService, args.coordinator, { maxReceiveMessageBytes: l.maxMessageBytes, maxSendMessageBytes: l.maxMessageBytes });
    heartbeat = createNodeHeartbeat({
      nodeId: config.nodeId,
      address: config.advertiseAddress === config.listen ? address : config.advertiseAddress,
      labels: config.labels,
      backends: Object.keys(config.catalog),
      source: agent,
      node,
      intervalMs: config.heartbeatIntervalMs,
      logger,
    });
    heartbeat.start();
  }

  const stopBackends = args.stopBackendsOnExit;
  return new Promise<number>((resolve) => {
    let shuttingDown = false;
    const onSignal = (sig: string): void => {
      if (shuttingDown) return;
      shuttingDown = true;
      logger.info("shutting down", { signal: sig, stopBackends });
      void (async () => {
        await heartbeat?.stop();
        await server.shutdown(2_000);
        metricsServer?.close();
        await agent.close({ stopBackends });
        resolve(0);
      })();
    };
    process.on("SIGTERM", () => { onSignal("SIGTERM"); });
    process.on("SIGINT", () => { onSignal("SIGINT"); });
  });
}

main().then(
  (code) => {
    process.exit(code);
  },
  (err: unknown) => {
    process.stderr.write(`agent failed: ${WardenError.from(err).message}\n`);
    process.exit(1);
  },
);
