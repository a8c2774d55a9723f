import type { MessageInitShape } from "@bufbuild/protobuf";
import { ServingStatus } from "@warden/grpc";
import type { GetHaStatusResponseSchema } from "@warden/proto";
import { Code, WardenError, backoffDelayMs, createUlidFactory, cryptoRng, nullLogger, systemClock, type Cancel } from "@warden/common";
import { leaseConfig } from "@warden/lease";
import type { CoordinatorConfig } from "../config/coordinator-config.js";
import { startCoordinator, type Coordinator } from "../coordinator.js";
import { checkHaRequirements } from "./ha-config.js";
import { HaMembers, type HaRole } from "./ha-members.js";
import { HaMetrics, serveHaMetrics } from "./ha-metrics.js";
import { leaseOpTimeoutMs, openHaNats, type HaNats } from "./ha-nats.js";
import { LeaseKeeper, type LeaseChange, type LeaseEntry } from "./lease-keeper.js";
import { checkListenersBindable, ephemeralPorts, portsInEphemeralRange } from "./listener-check.js";
import { haHealthService, startStandbyServer } from "./standby-server.js";
import type { HttpServer } from "../http/http-server.js";
import { haHttpView, httpUrlOf, pinHttpListen } from "./ha-http.js";
import { startStandbyHttp } from "./standby-http.js";
import { holderPrefix } from "./holder-prefix.js";
import type { HaRunner, HaRunnerDeps, Term, TermFence } from "./ha-runner-types.js";

export type { HaRunner, HaRunnerDeps } from "./ha-runner-types.js";

const pausedError = (): WardenError => new WardenError(Code.Unavailable, "not the leader: lease lost, no quorum");

/**
 * Runs one HA member. Opens NATS (connection, lease and state
 * buckets, journal stream: kept for the whole life, so a takeover pays only
 * for the journal replay and the recovery window), announces membership,
 * competes for the lease, and serves `listen` as a standby until it wins;
 * then runs the coordinator over the JetStream journal and state on the same
 * address. Every change of role goes through one serial queue.
 */
export async function runHaCoordinator(config: CoordinatorConfig, deps: HaRunnerDeps = {}): Promise<HaRunner> {
  const clock = deps.clock ?? systemClock;
  const log = deps.logger ?? nullLogger;
  const ha = config.ha;
  if (ha === undefined) throw new WardenError(Code.InvalidArgument, "ha: runHaCoordinator needs an ha: section (or --ha)");
  const advertise = checkHaRequirements({ ...config, ha });
  const nats = config.nats;
  if (nats === undefined) throw new WardenError(Code.InvalidArgument, "nats.url: required with ha:");
  const holder = `${holderPrefix(ha)}-${createUlidFactory(clock, deps.rng ?? cryptoRng)()}`;
  const hlog = log.child({ component: "ha", holder });
  // The runner owns /metrics in HA mode (served on standbys too).
  let current: CoordinatorConfig = { ...config, metricsListen: undefined };
  const n: HaNats = await openHaNats(nats, ha, `warden-coordinator-${holder}`, undefined, { log: hlog, clock });

  let term: Term = { kind: "none" };
  let closing = false;
  let takeovers = 0;
  let leaderEntry: LeaseEntry | undefined;
  let leaderEntryAtMs = clock.now();
  /** This member's HTTP base URL once its listener first bound (the leader's coordinator binds the same port). */
  let httpUrl: string | undefined;
  let rejectFailed: (err: unknown) => void = () => {};
  // A failed takeover or a listener that cannot bind pauses competing: 1 s doubling to 30 s.
  const competeBackoff = { initialMs: 1_000, factor: 2, maxMs: 30_000, jitter: 0.2 } as const;
  const rng = deps.rng ?? cryptoRng;
  let takeoverFailures = 0;
  let bindFailures = 0;
  let cancelCompete: Cancel = () => {};
  let competeAfter: (delayMs: number) => void = () => {};
  const failed = new Promise<never>((_, reject) => {
    rejectFailed = reject;
  });
  failed.catch(() => undefined);

  const isLeading = (): boolean => term.kind === "leading" && !term.paused && keeper.isLeader();
  const role = (): HaRole => (term.kind === "leading" ? (isLeading() ? "leader" : "paused") : "standby");
  const quorum = (): boolean => (term.kind === "leading" ? keeper.isLeader() : members.writesOk());
  const leaderAddress = (): string | undefined => (leaderEntry?.holder === null || leaderEntry?.holder === holder ? undefined : leaderEntry?.address);

  const httpView = (): ReturnType<typeof haHttpView> => haHttpView({ holder, role: role(), httpUrl, leader: leaderEntry, members: members.others() });

  const status = (): MessageInitShape<typeof GetHaStatusResponseSchema> => ({
    enabled: true,
    self: { holder, address: advertise, lastSeenMs: 0n, role: role(), httpUrl: httpUrl ?? "" },
    leaderHolder: leaderEntry?.holder ?? "",
    leaderAddress: leaderEntry?.holder === holder ? advertise : (leaderEntry?.address ?? ""),
    epoch: BigInt(leaderEntry?.epoch ?? 0),
    leaseAgeMs: BigInt(Math.max(0, Math.round(clock.now() - leaderEntryAtMs))),
    standbys: members.others().map((m) => ({ holder: m.holder, address: m.address, lastSeenMs: BigInt(Math.max(0, Math.round(clock.now() - m.seenAtMs))), role: m.role, httpUrl: m.httpUrl ?? "" })),
    quorum: quorum(),
    takeovers: BigInt(takeovers),
    // The same value the standby's HTTP answers name (one source: the announced URLs).
    leaderHttpUrl: httpView().leader?.httpUrl ?? "",
  });

  // Commands to agents carry the term's epoch, and only while the lease is held under it.
  const leaderEpoch = (): bigint => {
    const e = keeper.epoch();
    if (term.kind !== "leading" || e === undefined || BigInt(e) !== term.epoch) throw pausedError();
    return term.epoch;
  };

  let queue: Promise<void> = Promise.resolve();
  const enqueue = (what: string, step: () => Promise<void>): void => {
    queue = queue.then(step).catch((err: unknown) => {
      hlog.error("ha transition failed; this member stops serving", { what, err: err instanceof Error ? err.message : String(err) });
      rejectFailed(err);
    });
  };

  /**
   * The standby's HTTP listener, or undefined when `httpListen` is unset or
   * cannot bind now (another process holds the port): then the member serves
   * gRPC as a standby but does not compete (compete's listener check), and
   * binds HTTP again before each later check.
   */
  const standbyHttp = async (): Promise<HttpServer | undefined> => {
    if (current.httpListen === undefined) return undefined;
    let http: HttpServer;
    try {
      http = await startStandbyHttp({ config: current, listen: current.httpListen, view: httpView, log: hlog.child({ component: "http" }) });
    } catch (err) {
      hlog.warn("standby HTTP listener cannot bind; not competing until it can", { httpListen: current.httpListen, err: err instanceof Error ? err.message : String(err) });
      return undefined;
    }
    if (httpUrl === undefined) {
      current = pinHttpListen(current, http.address);
      httpUrl = httpUrlOf(current, advertise);
    }
    return http;
  };
  const serveStandby = async (): Promise<void> => {
    if (closing || term.kind === "standby") return;
    const server = await startStandbyServer({ config: current, leaderAddress, status, haServing: true, log: hlog });
    term = { kind: "standby", server, http: await standbyHttp() };
    hlog.info("ha standby listening", { address: server.address, advertise, leader: leaderEntry?.holder ?? "" });
    members.announce();
  };

  const endTerm = async (why: string): Promise<void> => {
    if (term.kind !== "leading") return;
    const t = term;
    term = { kind: "none" };
    if (t.paused) hlog.warn("no quorum episode ended: stepping down", { why });
    hlog.warn("stepping down: another coordinator leads", { why, epoch: t.epoch.toString() });
    await t.inner.close({ stopBackends: false });
    t.journal.close();
  };

  const stepDown = (why: string): void => {
    enqueue("step down", async () => {
      if (term.kind !== "leading") return;
      await endTerm(why);
      await serveStandby();
    });
  };

  const onLeader = (epochNum: number, previous: LeaseEntry | undefined): void => {
    // A takeover that fails anywhere below stands by again (takeoverFailed), never ends the process.
    enqueue("take the lead", () => orStandBy(BigInt(epochNum), async () => {
      if (closing || keeper.epoch() !== epochNum) return; // lost again before its turn
      const epoch = BigInt(epochNum);
      if (term.kind === "leading") {
        if (previous?.holder === holder) {
          // Nobody led in between: the state here is still the truth. Resume in place.
          term.epoch = epoch;
          term.fence.epoch = epoch;
          const wasPaused = term.paused;
          term.paused = false;
          term.fence.paused = false;
          term.inner.server.health.set(haHealthService, ServingStatus.SERVING);
          if (wasPaused) hlog.warn("quorum back: evictions and loads resume", { epoch: epoch.toString() });
          await publishLeader(term.inner, epoch, previous, true);
          members.announce();
          return;
        }
        await endTerm(`lease won again, but ${previous?.holder ?? "someone"} led in between`);
      }
      // The standby's HTTP listener answers 503 through the replay and is closed right before the coordinator binds its port.
      let standbyHttp: HttpServer | undefined;
      const releaseHttp = async (): Promise<void> => {
        const h = standbyHttp;
        standbyHttp = undefined;
        await h?.close();
      };
      if (term.kind === "standby") {
        standbyHttp = term.http;
        await term.server.close();
        term = { kind: "none" };
      }
      const startedAt = clock.now();
      // The term's fence: journal appends, publishing and timer-driven decisions act only
      // while the lease of this term is held at that moment (checked against the clock).
      const fence: TermFence = { epoch, paused: false };
      const held = (): bigint | undefined => {
        const e = keeper.epoch();
        return !fence.paused && e !== undefined && BigInt(e) === fence.epoch ? fence.epoch : undefined;
      };
      const journal = await n.openJournal(undefined, { writerEpoch: held, onSuperseded: (newer, detail) => { onSuperseded(newer, detail); } }).catch(async (err: unknown) => {
        await releaseHttp();
        throw err;
      });
      let inner: Coordinator;
      try {
        inner = await startCoordinator(current, {
          clock,
          ...(deps.rng === undefined ? {} : { rng: deps.rng }),
          logger: log,
          ha: { journal, state: n.state, leaderEpoch, termEpoch: epoch, onSuperseded: (newer, detail) => { onSuperseded(newer, detail); }, mayAct: () => held() !== undefined },
          haStatus: status,
          haView: httpView,
          beforeHttpListen: releaseHttp,
        });
      } catch (err) {
        journal.close();
        await releaseHttp();
        throw err;
      }
      await releaseHttp();
      term = { kind: "leading", epoch, inner, journal, paused: false, fence };
      takeovers++;
      metrics.takeovers.inc();
      inner.server.health.set(haHealthService, ServingStatus.SERVING);
      hlog.info("leading", { epoch: epoch.toString(), address: inner.address, advertise, takeoverMs: Math.round(clock.now() - startedAt), previousHolder: previous?.holder ?? "" });
      takeoverFailures = 0;
      await publishLeader(inner, epoch, previous, false);
      members.announce();
      // Lost while starting: the queued change after this one settles it.
      if (keeper.epoch() !== epochNum) onFollowerLike();
    }));
  };

  /**
   * A takeover that could not start (state store or journal not answering, a
   * port taken): give the lease up so another member can win one lease after
   * our last write, stand by again, and compete again after a backoff.
   */
  const orStandBy = async (epoch: bigint, takeover: () => Promise<void>): Promise<void> => {
    try {
      await takeover();
    } catch (err) {
      await takeoverFailed(epoch, err);
    }
  };
  const takeoverFailed = async (epoch: bigint, err: unknown): Promise<void> => {
    takeoverFailures++;
    metrics.takeoverFailures.inc();
    const retryInMs = backoffDelayMs(competeBackoff, takeoverFailures - 1, rng);
    hlog.error("takeover failed: lease given up, standing by; competing again after a pause", { epoch: epoch.toString(), err: err instanceof Error ? err.message : String(err), failures: takeoverFailures, retryInMs });
    if (term.kind === "leading") await endTerm("takeover failed");
    const k = keeperRef.k;
    keeperRef.k = undefined;
    await k?.stop();
    await serveStandby();
    competeAfter(retryInMs);
  };

  const publishLeader = async (c: Coordinator, epoch: bigint, previous: LeaseEntry | undefined, resumed: boolean): Promise<void> => {
    await c.hub.publish({
      payload: {
        case: "coordinatorLeader",
        value: { $typeName: "warden.v1.CoordinatorLeader", holder, epoch, address: advertise, previousHolder: previous?.holder ?? "", previousEpoch: BigInt(previous?.holder === null || previous === undefined ? 0 : previous.epoch), resumed },
      },
    });
  };

  /** The lease ended without anyone else taking it (renewals failing): pause, keep serving inference. */
  const pause = (): void => {
    if (term.kind !== "leading" || term.paused) return;
    term.paused = true;
    term.fence.paused = true;
    term.inner.server.health.set(haHealthService, ServingStatus.NOT_SERVING);
    hlog.warn("no quorum: evictions and loads paused, inference still routed", { epoch: term.epoch.toString() });
    members.announce();
  };
  const onFollowerLike = (): void => {
    if (keeper.epoch() === undefined) pause();
  };

  const onSuperseded = (newer: bigint, detail: string): void => {
    if (term.kind !== "leading" || newer <= term.epoch) return;
    pause();
    stepDown(detail);
  };

  const onChange = (c: LeaseChange): void => {
    if (c.kind === "leader") {
      onLeader(c.epoch, c.previous);
    } else if (c.reason === "superseded") {
      pause();
      stepDown("lease superseded");
    } else if (c.reason === "lease-expiring") {
      pause();
    }
  };

  const onEntry = (e: LeaseEntry): void => {
    if (e.holder !== leaderEntry?.holder || e.revision !== leaderEntry.revision) leaderEntryAtMs = clock.now();
    leaderEntry = e;
    // Someone else holds the key while this member still has a term (paused, or about to notice): step down.
    if (e.holder !== null && e.holder !== holder && term.kind === "leading") {
      pause();
      stepDown(`${e.holder} holds the lease`);
    }
  };

  const metrics = new HaMetrics({ isLeader: isLeading, quorum, renewals: () => keeper.renewals() });
  const members = new HaMembers({ kv: n.leaseKv, holder, address: advertise, role, httpUrl: () => httpUrl, isLeader: isLeading, intervalMs: ha.renewMs, opTimeoutMs: leaseOpTimeoutMs(ha), clock, log: hlog });
  // Serve as standby before competing: the address answers from the start.
  const keeperRef: { k: LeaseKeeper | undefined } = { k: undefined };
  const keeper = {
    isLeader: () => keeperRef.k?.isLeader() ?? false,
    epoch: () => keeperRef.k?.epoch(),
    renewals: () => keeperRef.k?.renewals() ?? { ok: 0, failed: 0 },
  };
  let metricsServer: Awaited<ReturnType<typeof serveHaMetrics>> | undefined;
  try {
    await serveStandby();
    metricsServer = config.metricsListen === undefined ? undefined : await serveHaMetrics(config.metricsListen, metrics.registry, () => (term.kind === "leading" ? [term.inner.metricsRegistry] : []));
  } catch (err) {
    const t = term as Term;
    if (t.kind === "standby") await Promise.all([t.server.close(), t.http?.close()]);
    await n.nc.close().catch(() => undefined);
    throw err;
  }
  members.start();
  /** Competes for the lease only when every listener a leader opens can bind; else checks again later. */
  const competing = (): boolean => closing || keeperRef.k !== undefined;
  const compete = async (): Promise<void> => {
    if (competing()) return;
    const t = term;
    if (t.kind === "standby" && t.http === undefined && current.httpListen !== undefined) {
      const http = await standbyHttp();
      if (term === t) term = { ...t, http };
      else await http?.close();
    }
    const held = term.kind === "standby" && term.http !== undefined && current.httpListen !== undefined ? [current.listen, current.httpListen] : [current.listen];
    const problems = await checkListenersBindable(current, held);
    if (competing()) return; // closed, or started by another path while the check ran
    if (problems.length > 0) {
      const retryInMs = backoffDelayMs(competeBackoff, bindFailures++, rng);
      hlog.warn("not competing for the lease: a listener the leader needs cannot bind; checking again", { problems: problems.map((p) => `${p.field} ${p.address}: ${p.error}`).join("; "), retryInMs });
      competeAfter(retryInMs);
      return;
    }
    bindFailures = 0;
    keeperRef.k = LeaseKeeper.start({
      kv: n.leaseKv,
      config: leaseConfig(holder, { leaseMs: ha.leaseMs, renewMs: ha.renewMs, marginMs: ha.marginMs, retryMs: Math.min(250, ha.renewMs) }),
      opTimeoutMs: leaseOpTimeoutMs(ha),
      clock,
      address: advertise,
      onChange,
      onEntry,
      log: hlog,
    });
  };
  competeAfter = (delayMs) => {
    cancelCompete();
    if (closing) return;
    cancelCompete = clock.setTimer(delayMs, () => {
      enqueue("compete for the lease", compete);
    });
  };
  await compete();
  const started = term as Term;
  hlog.info("ha member started", { holder, advertise, ...(httpUrl === undefined ? {} : { httpUrl }), address: started.kind === "standby" ? started.server.address : config.listen, replicas: ha.replicas, leaseMs: ha.leaseMs, renewMs: ha.renewMs, marginMs: ha.marginMs, ...(metricsServer === undefined ? {} : { metricsAddress: metricsServer.address }) });
  const ephemeral = await ephemeralPorts();
  const takeable = ephemeral === undefined ? [] : portsInEphemeralRange(config, ephemeral);
  if (takeable.length > 0 && ephemeral !== undefined) hlog.warn("listener ports the kernel may give an outgoing connection: one taken while this member hands it from standby to leader fails the takeover until that connection ends; reserve them (sysctl net.ipv4.ip_local_reserved_ports) or choose ports below the ephemeral range", { listeners: takeable.join("; "), ephemeralRange: `${String(ephemeral.min)}-${String(ephemeral.max)}` });

  let closed: Promise<void> | undefined;
  return {
    holder,
    advertise,
    metricsAddress: metricsServer?.address,
    httpUrl: () => httpUrl,
    failed,
    async reload(next) {
      const inner = pinHttpListen({ ...next, metricsListen: undefined }, current.httpListen);
      // Applied to the running term; a later term starts from it.
      if (term.kind === "leading") await term.inner.reload(inner);
      current = inner;
    },
    close(options = {}) {
      closed ??= (async () => {
        closing = true;
        cancelCompete();
        await keeperRef.k?.stop();
        await members.stop();
        await queue;
        const t = term;
        term = { kind: "none" };
        if (t.kind === "leading") {
          await t.inner.close({ stopBackends: options.stopBackends ?? false });
          t.journal.close();
        }
        if (t.kind === "standby") await Promise.all([t.server.close(), t.http?.close()]);
        metricsServer?.server.close();
        await n.nc.close().catch(() => undefined);
      })();
      return closed;
    },
  };
}
