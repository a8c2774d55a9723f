import { join, resolve } from "node:path";
import { artifactStoreService } from "./nodes/artifact-store-service.js";
import { create } from "@bufbuild/protobuf";
import { AdminService, ArtifactStoreService, JournalRepairedSchema, NodeService, type Event } from "@warden/proto";
import { GrpcServer, ServingStatus, type HandlerContext, type ServiceImpl } from "@warden/grpc";
import { cryptoRng, createUlidFactory, nullLogger, privateStateDir, sleep, systemClock, type Cancel } from "@warden/common";
import { Loader } from "@warden/loader";
import { createOutbox, nullPublisher, type Journal, type OutboxHealth, type Publisher } from "@warden/outbox";
import { openFileJournal, type FileJournal } from "@warden/journal";
import { describeAuditLinkState, startAuditLink, type AuditLink } from "@warden/audit";
import { servePrometheus } from "@warden/agent";
import { embeddedAgentConfig, startEmbeddedNode } from "./nodes/embedded-node.js";
import type { CoordinatorConfig } from "./config/coordinator-config.js";
import { auditedAdminService } from "./admin/admin-actor.js";
import { warnWithoutCoordinatorIdentity } from "./auth/coordinator-identity-check.js";
import type { BackendClientHandle } from "./routing/backend-connector.js";
import { coordinatorTransport } from "./auth/coordinator-transport.js";
import { nodeCertificateStreamCheck, withNodeCertificateCheck } from "./auth/node-certificate-check.js";
import { guarded, loadCoordinatorAuth, readTokenTable } from "./auth/coordinator-auth.js";
import { adminStreamRule, nodeStreamRule, revocableStreams } from "./auth/revocable-streams.js";
import { clientLimits, serverLimits } from "./config/limits-config.js";
import { EventHub } from "./admin/event-hub.js";
import { wireNodeRegistry } from "./nodes/node-registry-wiring.js";
import { nodeService, nodeServiceEncodedRequests } from "./nodes/node-service.js";
import { OutageServing } from "./nodes/outage-serving.js";
import { PlacementView } from "./admin/placement-view.js";
import { CoordinatorMetrics } from "./metrics.js";
import { registerAuditStreamMetrics } from "./audit-stream-metrics.js";
import { settleUnsettledEvictions } from "./nodes/unsettled-evictions.js";
import { artifactPulledEvent, startInstalledEvent } from "./nodes/artifact-audit.js";
import { restoreJournalReplicas } from "./nodes/journal-replicas-at-start.js";
import { startRecoveryWindow } from "./nodes/recovery-window-at-start.js";
import { startCoordinatorHttp } from "./http/coordinator-http.js";
import { CallActivity } from "./http/dashboard/call-activity.js";
import { DurableSettings } from "./ha/durable-settings.js";
import { TakeoverSettings } from "./ha/takeover-settings.js";
import { FileStateStore } from "./config/file-state-store.js";
import { NodesKnownAtStart } from "./nodes/nodes-known-at-start.js";
import { startDrain } from "./admin/start-drain.js";
import { natsCredentialsOf } from "./ha/ha-nats.js";
import { auditFenceOf } from "./ha/coordinator-ha-wiring.js";
import type { Coordinator, CoordinatorDeps } from "./coordinator-types.js";
import { registerAdmissionMetrics } from "./routing/admission-metrics.js";
import { wireInference } from "./routing/inference-wiring.js";
import { startWorkloadTrace, traceExporter } from "./trace/workload-trace.js";
import { registerTraceMetrics } from "./trace/trace-metrics.js";

export type { Coordinator, CoordinatorDeps } from "./coordinator-types.js";

/** How long close() lets open gRPC calls finish before cutting them. */
const shutdownGraceMs = 2_000;

/**
 * Starts a coordinator: journal and outbox (replaying stop intents and
 * unpublished events), the loader over the watchdog, the node registry, the
 * embedded agent (single-machine mode) heartbeating in process every second,
 * and the gRPC server with Admin, Inference and Node services plus health and
 * reflection. Only wiring lives here; decisions live in the packages.
 */
export async function startCoordinator(config: CoordinatorConfig, deps: CoordinatorDeps = {}): Promise<Coordinator> {
  const clock = deps.clock ?? systemClock;
  const rng = deps.rng ?? cryptoRng;
  const log = deps.logger ?? nullLogger;
  const stateDir = resolve(config.stateDir);
  // Owner-only (journal, agent records): a state dir or file others could read is tightened, and said.
  for (const t of await privateStateDir(stateDir)) log.warn("state readable by other users: tightened", { ...t });
  const newId = createUlidFactory(clock, rng);

  const journalPath = join(stateDir, "coordinator.journal");
  // In HA the journal is the replicated JetStream stream, owned by the runner.
  const fileJournal: FileJournal | undefined = deps.ha === undefined ? await openFileJournal({ path: journalPath }) : undefined;
  const journal: Journal = deps.ha?.journal ?? (fileJournal as FileJournal);
  if (fileJournal?.repaired !== undefined) {
    const r = fileJournal.repaired;
    log.warn(`journal torn tail repaired: cut ${String(r.droppedBytes)} bytes (${String(r.droppedRecords)} records) at offset ${String(r.offsetBytes)}`, { ...r });
  }
  // The operators' settings are read first: HA from its KV bucket (a leader that cannot read them does not
  // lead), one coordinator from its state dir (a file it cannot read fails the start, naming it).
  const settingsLog = log.child({ component: deps.ha === undefined ? "settings" : "ha-settings" });
  const durable = await DurableSettings.load(deps.ha?.state ?? (await FileStateStore.open(stateDir)), settingsLog);
  // Made once the loader exists; the node registry's callbacks (made before) reach them through this.
  const late: { takeover?: TakeoverSettings; knownAtStart?: NodesKnownAtStart } = {};
  // Serving through an agent outage: ready instances of an unreachable node stay routable while the coordinator's own probe answers.
  const outage = new OutageServing({ clock, log: log.child({ component: "outage" }), probeIntervalMs: config.outageProbeIntervalMs, probeTimeoutMs: config.outageProbeTimeoutMs });
  const auth = await loadCoordinatorAuth(config.auth, [config.listen, config.inferenceListen], log.child({ component: "auth" }));
  const authn = auth.authenticator;
  // Certificate files are read and checked before anything listens (a bad one fails the start).
  const transport = coordinatorTransport(config, auth.backendHeaders, clientLimits(config.limits));
  warnWithoutCoordinatorIdentity(config.tls, log);
  const server = new GrpcServer({ ...transport.controlPlane, ...serverLimits(config.limits) });
  // `warden.audit` serves only while the outbox is healthy and, with NATS
  // configured, the audit stream is confirmed on the current connection.
  let outboxHealth: OutboxHealth = { status: "serving" };
  let auditLink: AuditLink | undefined;
  const setAuditHealth = (): void => {
    const linkReady = auditLink === undefined || auditLink.state().status === "ready";
    server.health.set("warden.audit", outboxHealth.status === "serving" && linkReady ? ServingStatus.SERVING : ServingStatus.NOT_SERVING);
  };
  let publisher: Publisher = nullPublisher;
  if (config.nats !== undefined) {
    const n = config.nats;
    const linkLog = log.child({ component: "audit-link" });
    // Connects and confirms the stream in the background, retrying forever:
    // the coordinator serves meanwhile and the outbox keeps the events.
    auditLink = startAuditLink({
      connection: { servers: n.url, credentials: natsCredentialsOf(n), name: "warden-coordinator", ...(n.inboxPrefix === undefined ? {} : { inboxPrefix: n.inboxPrefix }) },
      // HA: the audit stream is replicated like the journal, so one server lost stops no publishing.
      ...(config.ha === undefined ? {} : { stream: { replicas: config.ha.replicas } }),
      // HA: each publish is conditional on the stream's last event, so an ex-leader's is refused once this term's successor published.
      ...(deps.ha === undefined ? {} : { publisher: { fence: auditFenceOf(deps.ha, linkLog) } }),
      clock,
      rng,
      logger: linkLog,
      onStateChange: (st) => {
        if (st.status !== "ready" && st.status !== "closed") linkLog.debug("audit link not ready", { state: describeAuditLinkState(st) });
        setAuditHealth();
      },
    });
    publisher = auditLink.publisher;
  }
  // HA: one gate for every timer-driven decision and for publishing (coordinator-ha-wiring.ts).
  const mayAct = deps.ha?.mayAct;
  const outbox = createOutbox({
    journal,
    publisher,
    ...(mayAct === undefined ? {} : { mayPublish: mayAct }),
    ...(deps.ha?.termEpoch === undefined ? {} : { leaderEpoch: deps.ha.termEpoch }),
    clock,
    rng,
    newId,
    onHealthChange: (h) => {
      outboxHealth = h;
      setAuditHealth();
      if (h.status !== "serving") log.error("audit outbox not serving", { reason: h.reason });
    },
  });
  const recovery = await outbox.start().catch(async (err: unknown) => {
    // Not started: leave no retry timer or connection behind.
    await auditLink?.close();
    throw err;
  });
  setAuditHealth();
  const hub = new EventHub(outbox, log.child({ component: "events" }), config.limits);
  for (const e of recovery.recovered) hub.deliver(e);
  // Right after recovery and before any new decision, so the audit trail says
  // where records may be missing (the dropped tail may have held an acknowledged one).
  const startupEvents: Event[] = [];
  if (fileJournal?.repaired !== undefined) {
    const r = fileJournal.repaired;
    const e = await hub.publish({ payload: { case: "journalRepaired", value: create(JournalRepairedSchema, { path: r.path, droppedBytes: BigInt(r.droppedBytes), droppedRecords: r.droppedRecords }) } });
    if (e !== undefined) startupEvents.push(e);
  }

  // The node registry with its audit events, logs and late hooks (nodes/node-registry-wiring.ts).
  const nodes = wireNodeRegistry({ config, clock, log, connect: (address, nodeId) => transport.connectAgent(address, nodeId), ha: deps.ha, late, outbox, hub, outage });
  const placement = new PlacementView(nodes, config.placement);
  // A coordinator that may have had backends running before (remote agents,
  // or a journal with history) lets inventories arrive before new loads start.
  const mayHaveRunningBackends = !config.embeddedAgent || recovery.requeued > 0 || recovery.recovered.length > 0 || recovery.openStopIntents.length > 0;
  // Opened by the recovery window (recovery-window-at-start.ts), below: when the journal's nodes have reported.
  let openGate = (): void => {};
  const admissionGate =
    mayHaveRunningBackends && config.recoveryWindowMs > 0
      ? new Promise<void>((resolveGate) => {
          openGate = resolveGate;
        })
      : undefined;
  // Calls as they begin and end, for the dashboard (busy state pushed, the metrics ring).
  const calls = new CallActivity();
  const loader = new Loader<BackendClientHandle>({
    onCall: calls.onCall,
    ...(admissionGate === undefined ? {} : { admissionGate }),
    clock,
    rng,
    sleep: (ms, signal) => sleep(clock, ms, signal),
    agents: outage.directory(nodes),
    // Routing only: the stop sequence's Free goes through the node's agent (AgentPort.freeBackend), fenced there.
    backends: transport.backends,
    ...(mayAct === undefined ? {} : { mayAct }),
    caps: { maxOpenRequestsPerAddress: config.limits.maxOpenRequestsPerInstance },
    maxWaitingPerModel: config.limits.maxWaitingPerModel,
    journal: {
      recordStopIntent: (i) => outbox.recordStopIntent(i),
      clearStopIntent: (inc) => outbox.clearStopIntent(inc),
    },
    events: hub,
    placement,
    inventories: nodes,
    mintIncarnation: newId,
    models: config.models,
    policy: config.policy,
    stop: config.stop,
    enforcement: config.enforcement,
    loadWaitMs: config.loadWaitMs,
    cooldown: config.cooldown,
    onWarning: (msg, meta) => {
      log.warn(msg, meta);
    },
  });
  // Evictions the previous coordinator never settled become stop intents too (unsettled-evictions.ts).
  const openAtStart = await settleUnsettledEvictions(outbox, hub, recovery.unsettledEvictions);
  const operatorSettings = new TakeoverSettings({ loader, nodes, hub, outbox, clock, log: settingsLog, settings: durable.settings, startDrain: (nodeId, drain) => {
    const n = nodes.get(nodeId);
    if (n !== undefined) startDrain({ loader, hub }, n, { force: drain.force, ...(drain.actor === undefined ? {} : { actor: drain.actor }), resumed: true });
  } }, durable.loaded);
  late.takeover = operatorSettings;
  // HA: a forgotten incarnation is neither a leftover from its intent nor a journal replica.
  const intentsAtStart = await operatorSettings.withoutForgottenIntents(openAtStart);
  const recoveredAtStart = await operatorSettings.withoutForgottenReplicas(recovery.recovered);
  // Nodes known before this start are listed until they register (or the node-lost timeout passes).
  const known = new NodesKnownAtStart([...recoveredAtStart, ...intentsAtStart].map((r) => r.nodeId).concat(operatorSettings.nodesNamed()).filter((id) => !operatorSettings.lostUnregistered.has(id) && nodes.get(id) === undefined));
  late.knownAtStart = known;
  const knownTimer =
    known.size === 0
      ? undefined
      : clock.setTimer(config.nodeLostAfterMs, () => {
          const lost = known.expire();
          if (lost.length > 0) log.warn("nodes known before the restart never reported: listed as lost", { count: lost.length, lostAfterMs: config.nodeLostAfterMs, nodes: lost.slice(0, 32) });
        });
  const openIntents = new Set(intentsAtStart.map((i) => i.incarnation));
  nodes.attach(loader, (inc) => openIntents.has(inc) || outbox.hasStopIntent(inc));
  placement.attach(loader);
  outage.attach(loader);
  // Every open stop intent is a leftover on its node from the first moment —
  // before any node registers — so listing, unloading and accounting see it;
  // its node's first inventory reaps it or has its stop retried.
  const restored = loader.restoreStopIntents(intentsAtStart);
  if (restored > 0) log.info("open stop intents restored as leftovers", { count: restored });
  // Every other instance the journal last saw alive counts as an unconfirmed
  // replica on its node until that node reports (or is lost): otherwise a node
  // back after the recovery window brings replicas on top of max.
  const unconfirmedTimer = restoreJournalReplicas(loader, recoveredAtStart, { clock, log, lostAfterMs: config.nodeLostAfterMs });
  const windowTimer = admissionGate === undefined ? undefined : startRecoveryWindow({ loader, clock, log, windowMs: config.recoveryWindowMs, journaledNodes: [...recoveredAtStart, ...intentsAtStart].map((r) => r.nodeId), open: openGate });
  // The operators' policy, scale, node limits and lost nodes (kept in the state dir, or the old HA leader's),
  // before any node registers or admission opens.
  operatorSettings.applyAtStart();

  // Before any node registers (the trace sees it join) and before the Admin service (ExportTrace reads it).
  const trace = await startWorkloadTrace({ settings: config.trace, stateDir, clock, log: log.child({ component: "trace" }), nodes, hub });
  // With auth on, every remote registration carries a node token bound to its id (the guard checks it).
  const nodeImpl = withNodeCertificateCheck(nodeService(nodes, clock, recovery.epoch, { credentialed: authn !== undefined, caps: { maxInventory: config.limits.maxInventoryPerHeartbeat, maxOrphans: config.limits.maxOrphansPerHeartbeat }, ...(deps.ha === undefined ? {} : { ha: deps.ha }), onEvicted: (nodeId, e) => void hub.publish({ nodeId, payload: { case: "artifactEvicted", value: { $typeName: "warden.v1.ArtifactEvicted", ...e } } }), onPulled: (nodeId, p) => void hub.publish(artifactPulledEvent(nodeId, p)), onStartInstalled: (nodeId, b) => void hub.publish(startInstalledEvent(nodeId, b)), heartbeatStream: config.heartbeatStream, ...(authn === undefined ? {} : { streamNodeOf: (ctx: HandlerContext) => authn.principalOf(ctx)?.nodeId }), ...(transport.mutual ? { streamCheck: nodeCertificateStreamCheck } : {}) }), transport.mutual, transport.probeAgentAddress);
  const adminImpl = auditedAdminService(authn, log, { clock, loader, nodes, hub, placement, enforcement: config.enforcement, defaultStopTimeoutMs: config.stop.stopTimeoutMs, ...(deps.haStatus === undefined ? {} : { haStatus: deps.haStatus }), settings: durable.settings, takeover: operatorSettings, knownAtStart: known, ...traceExporter(trace, stateDir), outage: outage.view, ...(deps.ha === undefined ? {} : { requireCommands: () => void deps.ha?.leaderEpoch(), commandEpoch: deps.ha.leaderEpoch, onStaleEpoch: (e) => { deps.ha?.onSuperseded(e.newestSeen, e.rawMessage); } }) });
  server.add(AdminService, guarded(AdminService, authn === undefined ? adminImpl : revocableStreams(AdminService, adminImpl, authn, adminStreamRule), authn?.admin));
  // Every inference route on both ports, with prefix routing and the admission gate in front (routing/inference-wiring.ts).
  const { routed, prefixRouting, admission, dataPlane, ...inferenceRoutes } = wireInference({ config, loader, clock, hub, log, authn, server, transport, observer: trace?.calls, onTokens: calls.onTokens });
  // HeartbeatStream held against its node token: a reload that revokes the token ends the stream.
  // HeartbeatStream's requests reach it as their bytes (nodeServiceEncodedRequests); the wrappers pass them on untouched.
  const servedNodeImpl = nodeImpl as unknown as ServiceImpl<typeof NodeService>;
  server.add(NodeService, guarded(NodeService, authn === undefined ? servedNodeImpl : revocableStreams(NodeService, servedNodeImpl, authn, nodeStreamRule), authn?.node), { encodedRequests: nodeServiceEncodedRequests });
  // The artifact store: to node credentials only, as NodeService (artifact-store-service.ts).
  const storeImpl = artifactStoreService(config.artifactStore, { mutual: transport.mutual });
  server.add(ArtifactStoreService, guarded(ArtifactStoreService, storeImpl, authn?.node));
  if (dataPlane !== undefined) transport.attachDataPlane(dataPlane);

  // The single-machine default: an agent in this process, reporting through the same heartbeat path.
  const embedded = config.embeddedAgent ? await startEmbeddedNode({ config, clock, rng, log, nodes, nodeImpl, storeImpl }) : undefined;
  const agent = embedded?.agent;
  const heartbeat = embedded?.heartbeat;

  const metrics = new CoordinatorMetrics(loader, nodes, outbox);
  if (auditLink !== undefined) registerAuditStreamMetrics(metrics.registry, auditLink);
  registerAdmissionMetrics(metrics.registry, admission.gate);
  if (trace !== undefined) registerTraceMetrics(metrics.registry, trace);
  inferenceRoutes.countInto(metrics.routedCalls);
  hub.observe((e) => {
    metrics.observe(e);
  });
  for (const e of startupEvents) metrics.observe(e);
  let metricsServer: Awaited<ReturnType<typeof servePrometheus>> | undefined;
  let currentConfig = config;
  let listening: [{ address: string }, string | undefined, Awaited<ReturnType<typeof startCoordinatorHttp>>];
  try {
    metricsServer = config.metricsListen === undefined ? undefined : await servePrometheus(metrics.registry, config.metricsListen);
    listening = [
      await server.listen(config.listen),
      dataPlane === undefined || config.inferenceListen === undefined ? undefined : (await dataPlane.listen(config.inferenceListen)).address,
      // HA: the standby's HTTP listener gives the port up once the leader's app is built, right before it binds.
      await startCoordinatorHttp({ config: () => currentConfig, clock, loader, nodes, hub, admin: adminImpl, authenticator: authn, routed, gate: admission.gate, callObserver: trace?.calls, newId, prefixRouting, filesDir: join(stateDir, "http-files"), calls, localNodeId: config.embeddedAgent ? embeddedAgentConfig(config).nodeId : undefined, ...(deps.haView === undefined ? {} : { haView: deps.haView }), beforeListen: deps.beforeHttpListen, log: log.child({ component: "http" }) }),
    ];
  } catch (err) {
    // A listener that cannot bind ends the start: release what already listens or runs, so an
    // HA member can stand by again on its address (it retries the takeover later).
    try {
      unconfirmedTimer?.();
      windowTimer?.();
      knownTimer?.();
      outage.close();
      loader.close();
      await heartbeat?.stop();
      hub.close();
      await Promise.allSettled([server.shutdown(0), dataPlane?.shutdown(0)]);
      metricsServer?.server.close();
      nodes.close();
      await agent?.close({ stopBackends: false });
      await outbox.close();
      await fileJournal?.close();
      await auditLink?.close();
      await trace?.close();
    } catch {
      // the start's own error is the one to report
    }
    throw err;
  }
  const [{ address }, inferenceAddress, http] = listening;
  loader.startTicking();
  let healthTimer: Cancel | undefined;
  const healthLoop = (): void => {
    // HA: a member resumed after a pause past its lease has heard no heartbeat for that long;
    // it marks nothing unreachable or lost (the nodes heartbeat the current leader).
    if (mayAct?.() !== false) nodes.checkHealth();
    healthTimer = clock.setTimer(1_000, healthLoop);
  };
  healthTimer = clock.setTimer(1_000, healthLoop);
  log.info("coordinator listening", { address, ...(inferenceAddress === undefined ? {} : { inferenceAddress }), ...(http === undefined ? {} : { httpAddress: http.server.address }), models: config.models.map((m) => m.id), embeddedAgent: config.embeddedAgent, nats: config.nats !== undefined, epoch: recovery.epoch.toString() });

  let closed = false;
  return {
    address,
    metricsAddress: metricsServer?.address,
    metricsRegistry: metrics.registry,
    inferenceAddress,
    httpAddress: http?.server.address,
    config,
    loader,
    nodes,
    hub,
    outbox,
    server,
    agent,
    async reload(next) {
      // Certificates and tokens are read and checked first, whole: a broken file rejects the whole reload before anything changes.
      const applyTls = transport.prepareReload(next);
      const tokens = authn === undefined || next.auth.tokensFile === undefined ? undefined : await readTokenTable(next.auth.tokensFile);
      if ((next.auth.tokensFile === undefined) !== (authn === undefined)) log.warn("auth.tokensFile turned on or off: takes effect at the next start");
      // Reads its certificate again and swaps it; throws (nothing changed yet) on a broken file.
      http?.reload(next);
      applyTls();
      currentConfig = next;
      inferenceRoutes.reload(next);
      if (tokens !== undefined) authn?.replace(tokens);
      await Promise.all(loader.setModels(next.models));
      loader.updatePolicy(next.policy);
      // The API's policy changes stay on top of the reloaded config (logged, field by field).
      operatorSettings.afterReload(next.models);
      log.info("config reloaded", { models: next.models.map((m) => m.id) });
    },
    async close(options) {
      if (closed) return;
      closed = true;
      healthTimer?.();
      unconfirmedTimer?.();
      windowTimer?.();
      knownTimer?.();
      outage.close();
      // Decisions stop first: no tick, leftover retry or freed retry may act
      // while the server drains its calls.
      loader.close();
      await trace?.close();
      await heartbeat?.stop();
      // Followers' WatchEvents streams never end by themselves: end them first,
      // or the drain below waits out its whole grace for them.
      hub.close();
      // HTTP calls still open are cut (their signals abort, their leases complete).
      const [controlPlane, data] = await Promise.all([server.shutdown(shutdownGraceMs), dataPlane?.shutdown(shutdownGraceMs), http?.server.close()]);
      if (controlPlane === "forced" || data === "forced") {
        log.warn("gRPC calls still open after the shutdown grace were cut", { graceMs: shutdownGraceMs, controlPlane, dataPlane: data ?? "none" });
      }
      metricsServer?.server.close();
      nodes.close();
      await agent?.close({ stopBackends: options.stopBackends });
      await outbox.close();
      await fileJournal?.close();
      await auditLink?.close();
    },
  };
}
