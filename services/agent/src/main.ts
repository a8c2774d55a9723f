import { readFile } from "node:fs/promises";
import { WardenError, createLogger, readSecretFile, systemClock } from "@warden/common";
import { GrpcServer, ReloadableServerCredentials, bearerMetadata, clientTlsOf, readTlsMaterial, routeGrpcJsLogs } from "@warden/grpc";
import { AgentService } from "@warden/proto";
import { agentUsage, parseAgentArgs } from "./agent-args.js";
import { parseAgentConfig } from "./agent-config.js";
import { checkAgentFiles } from "./agent-files.js";
import { withCoordinatorOnly } from "./coordinator-only.js";
import { createAgent } from "./agent.js";
import { builtinCatalog } from "./backend-sim-catalog.js";
import { createNodeHeartbeat, type NodeHeartbeat } from "./node-heartbeat.js";
import { coordinatorList, type CoordinatorList } from "./coordinator-list.js";
import { placementLimitsMessage } from "./agent-placement-limits.js";
import { createAgentMetrics } from "./agent-metrics.js";
import { servePrometheus } from "./prometheus-server.js";
import { coordinatorStoreReader } from "./artifact-store-client.js";
import { PeerArtifactService } from "@warden/proto";
import { PeerClients, peerChannelOptions } from "./peer-source.js";
import { createPeerArtifactService } from "./peer-upload.js";
import { loadOrCreatePeerKey } from "./peer-key.js";
import { readRegistryAuthFile } from "./registry-auth.js";
import { RegistryCredentials, modeText } from "./registry-credentials.js";

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
  const placementLimits = { ...config.placementLimits, ...(args.maxReplicasPerModel === undefined ? {} : { maxReplicasPerModel: args.maxReplicasPerModel }), ...(args.memoryBudget === undefined ? {} : { memoryBudget: args.memoryBudget }) };
  // Read and checked before anything starts: a missing or mismatched file is exit 2 naming it.
  let tls;
  let registryAuth;
  try {
    tls = config.tls === undefined ? undefined : readTlsMaterial(config.tls, "tls");
    registryAuth = config.registryAuthFile === "" ? undefined : readRegistryAuthFile(config.registryAuthFile, "registryAuthFile");
    if (args.checkConfig) checkAgentFiles(config);
  } catch (err) {
    process.stderr.write(`config ${args.configPath}: ${WardenError.from(err).rawMessage}\n`);
    return 2;
  }
  if (args.checkConfig) {
    if (registryAuth?.exposedMode !== undefined) process.stderr.write(`config ${args.configPath}: warning: registryAuthFile ${config.registryAuthFile} has mode ${modeText(registryAuth.exposedMode)}, readable by group or others: chmod 600 it\n`);
    const catalog = Object.entries(config.catalog).map(([name, e]) => `${name} (${[e.command, ...e.args].join(" ")})`);
    process.stdout.write(
      `config ${args.configPath}: valid\n  nodeId      ${config.nodeId}\n  listen      ${listen} (advertised ${config.advertiseAddress})\n  stateDir    ${config.stateDir}\n` +
        `  tls         ${config.tls === undefined ? "off" : `${config.tls.certFile}${config.tls.caFile === undefined ? "" : " (mutual TLS)"}`}\n  ports       ${String(config.portMin)}–${String(config.portMax)} on ${config.backendHost}\n  gpus        ${config.gpus.join(",") || "-"} (nvidia-smi: ${config.nvidiaSmiPath || "off"})\n  labels      ${Object.entries(config.labels).map(([k, v]) => `${k}=${v}`).join(",") || "-"}\n  catalog     ${catalog.join("; ")}\n` +
        `  registries  ${registryAuth === undefined ? "anonymous" : `${String(registryAuth.logins.size)} with credentials (${config.registryAuthFile})`}\n` +
        `  placement   maxReplicasPerModel ${String(placementLimits.maxReplicasPerModel ?? "1 (default)")}, memoryBudget ${placementLimits.memoryBudget === undefined ? "all" : placementLimits.memoryBudget.t === "bytes" ? `${String(placementLimits.memoryBudget.bytes)} bytes` : `${String(placementLimits.memoryBudget.percent)}%`}\n`,
    );
    return 0;
  }
  const logger = createLogger({ name: "agent", level: process.env.LOG_LEVEL ?? "info" });
  const grpcLog = logger.child({ component: "grpc-js" });
  routeGrpcJsLogs((message) => {
    grpcLog.debug(message);
  });
  // The coordinators' artifact store, read with this node's credentials (artifact-store-client.ts).
  const store = args.coordinator === undefined ? undefined : coordinatorStoreReader({ addresses: args.coordinator, nodeId: config.nodeId, clientOptions: { ...(tls === undefined ? {} : { tls: clientTlsOf(tls) }), ...(config.coordinatorTokenFile === "" ? {} : { headers: bearerMetadata(readSecretFile(config.coordinatorTokenFile, "coordinatorTokenFile")) }) } });
  // Other agents' artifact caches, dialled with this agent's own TLS (peer-source.ts).
  const peerClients = config.modelsPath === undefined ? undefined : new PeerClients({ maxReceiveMessageBytes: config.limits.maxMessageBytes, channelOptions: peerChannelOptions, ...(tls === undefined ? {} : { tls: clientTlsOf(tls) }) });
  // Private registries' credentials: kept here so SIGHUP can swap them; each pull asks for its registry's when it starts.
  const registries = registryAuth === undefined ? undefined : new RegistryCredentials(config.registryAuthFile, "registryAuthFile", logger, registryAuth);
  const agent = createAgent(config, { logger, ...(store === undefined ? {} : { storeReader: store.reader }), ...(peerClients === undefined ? {} : { peerClients }), ...(registries === undefined ? {} : { registryLogin: registries.lookup }) });
  const report = await agent.start();
  logger.info("state dir adopted", { adopted: report.adopted, forgotten: report.forgotten, stoppedUnfinished: report.stoppedUnfinished, orphans: report.orphans.length });
  const credentials = tls === undefined ? undefined : new ReloadableServerCredentials(tls);
  const l = config.limits;
  const server = new GrpcServer({ insecure: args.insecure || config.insecure, ...(credentials === undefined ? {} : { credentials }), maxReceiveMessageBytes: l.maxMessageBytes, maxSendMessageBytes: l.maxMessageBytes, maxMetadataBytes: l.maxMetadataBytes, maxConcurrentStreams: l.maxStreamsPerConnection, peerCaps: l.peerCaps });
  // Mutual TLS: the CA vouches for every node and operator too, so only the coordinator's certificate may command this agent (coordinator-only.ts).
  // Without it no caller proves anything: plaintext is loopback-only unless `insecure` (listen-guard.ts), and the operator is told.
  server.add(AgentService, tls?.ca === undefined ? agent.service : withCoordinatorOnly(agent.service, logger));
  // Peers read this cache with a ticket the coordinator granted them, not as the coordinator (peer-upload.ts).
  const artifactCache = agent.artifacts;
  const peerKey = artifactCache === undefined ? undefined : await loadOrCreatePeerKey(config.stateDir);
  if (artifactCache !== undefined && peerKey !== undefined && config.modelsPath !== undefined) {
    const key = peerKey;
    server.add(PeerArtifactService, createPeerArtifactService({ nodeId: config.nodeId, key, cache: artifactCache, modelsPath: config.modelsPath, clock: systemClock, logger, stallTimeoutMs: config.artifactStallTimeoutMs }));
  }
  if (tls?.ca === undefined) logger.warn("AgentService takes commands from any caller that reaches it: configure tls with a ca (mutual TLS) so only the coordinator's certificate may command this agent", { listen, tls: tls === undefined ? "off" : "server-only" });
  const { address } = await server.listen(listen);
  logger.info("agent listening", { address, nodeId: config.nodeId, pid: process.pid });

  const metricsServer = args.metrics === undefined ? undefined : (await servePrometheus(createAgentMetrics(agent), args.metrics)).server;
  if (args.metrics !== undefined) logger.info("metrics listening", { address: args.metrics });
  let heartbeat: NodeHeartbeat | undefined;
  let node: CoordinatorList | undefined;
  if (args.coordinator !== undefined) {
    // This node's token (the coordinator binds it to config.nodeId): read once, sent on every Register and Heartbeat.
    // Several addresses (HA): the list follows the leader and re-registers when it changes (coordinator-list.ts).
    node = coordinatorList({ addresses: args.coordinator, logger, clientOptions: { maxReceiveMessageBytes: l.maxMessageBytes, maxSendMessageBytes: l.maxMessageBytes, ...(tls === undefined ? {} : { tls: clientTlsOf(tls) }), ...(config.coordinatorTokenFile === "" ? {} : { headers: bearerMetadata(readSecretFile(config.coordinatorTokenFile, "coordinatorTokenFile")) }) } });
    heartbeat = createNodeHeartbeat({
      nodeId: config.nodeId,
      address: config.advertiseAddress === config.listen ? address : config.advertiseAddress,
      labels: config.labels,
      backends: Object.keys(config.catalog),
      backendBundles: Object.fromEntries(Object.entries(config.catalog).flatMap(([name, e]) => (e.bundle === undefined ? [] : [[name, e.bundle.sha256]]))),
      limits: placementLimitsMessage(placementLimits),
      ...(peerKey === undefined ? {} : { peerKey }),
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
        node?.close();
        store?.close();
        peerClients?.close();
        agent.endWatches();
        const drain = await server.shutdown(2_000);
        metricsServer?.close();
        await agent.close({ stopBackends });
        // The last line: what the shutdown did ("forced" = calls were still open after the grace).
        logger.info("agent stopped", { signal: sig, server: drain, stopBackends });
        resolve(0);
      })();
    };
    process.on("SIGTERM", () => { onSignal("SIGTERM"); });
    process.on("SIGINT", () => { onSignal("SIGINT"); });
    // SIGHUP: new TLS handshakes use the certificate files as they are now (a
    // renewed certificate); the listener and open connections stay. Registry
    // credentials are read again too (a rotated password); a bad file keeps the old ones.
    process.on("SIGHUP", () => {
      registries?.reload();
      if (config.tls === undefined || credentials === undefined) return;
      try {
        credentials.update(readTlsMaterial(config.tls, "tls"));
        logger.info("tls certificate reloaded", { cert: config.tls.certFile });
      } catch (err) {
        logger.error("tls reload rejected; keeping the running certificate", { err: WardenError.from(err).rawMessage });
      }
    });
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
