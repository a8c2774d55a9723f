import { hostname } from "node:os";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { ServingStatus } from "@warden/grpc";
import type { GetHaStatusResponseSchema } from "@warden/proto";
import { Code, WardenError, createUlidFactory, cryptoRng, nullLogger, systemClock, type Clock, type Logger, type Rng } from "@warden/common";
import { leaseConfig } from "@warden/lease";
import type { CoordinatorConfig } from "../coordinator-config.js";
import { startCoordinator, type Coordinator } from "../coordinator.js";
import { checkHaRequirements, type HaConfig } from "./ha-config.js";
import { HaMembers, type HaRole } from "./ha-members.js";
import { HaMetrics, serveHaMetrics } from "./ha-metrics.js";
import { leaseOpTimeoutMs, openHaNats, type HaNats } from "./ha-nats.js";
import type { JetStreamJournal } from "./jetstream-journal.js";
import { LeaseKeeper, type LeaseChange, type LeaseEntry } from "./lease-keeper.js";
import { haHealthService, startStandbyServer, type StandbyServer } from "./standby-server.js";

export interface HaRunnerDeps {
  readonly clock?: Clock;
  readonly rng?: Rng;
  readonly logger?: Logger;
}

/** One HA member (`warden coordinator --ha`), leader or standby. */
export interface HaRunner {
  readonly holder: string;
  /** The advertised host:port. */
  readonly advertise: string;
  /** host:port of `/metrics`, when `metricsListen` is set. */
  readonly metricsAddress: string | undefined;
  /** Rejects if this member can no longer serve (a takeover failed to start): the process should exit. */
  readonly failed: Promise<never>;
  reload(config: CoordinatorConfig): Promise<void>;
  /** Leaves the lease and the membership, closes the inner coordinator or standby server, then NATS. Backends keep running. */
  close(options?: { readonly stopBackends?: boolean }): Promise<void>;
}

/** The lease epoch a term writes and commands under, and whether it is paused (read by the term's fences at the moment they act). */
interface TermFence {
  epoch: bigint;
  paused: boolean;
}

/** Who serves on `listen` right now: one owner (the runner's serial queue) changes it. */
type Term =
  | { readonly kind: "none" }
  | { readonly kind: "standby"; readonly server: StandbyServer }
  /** `epoch`: the lease revision this term acts under (a resume in place moves it on). */
  | { readonly kind: "leading"; epoch: bigint; readonly inner: Coordinator; readonly journal: JetStreamJournal; paused: boolean; readonly fence: TermFence };

const pausedError = (): WardenError => new WardenError(Code.Unavailable, "not the leader: lease lost, no quorum");

function holderPrefix(ha: HaConfig): string {
  return ha.holder ?? (hostname().replace(/[^A-Za-z0-9_-]/g, "-").slice(0, 64) || "coordinator");
}

/**
 * Runs one HA member (issue 17). Opens NATS (connection, lease and state
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
  let rejectFailed: (err: unknown) => void = () => {};
  const failed = new Promise<never>((_, reject) => {
    rejectFailed = reject;
  });
  failed.catch(() => undefined);

  const isLeading = (): boolean => term.kind === "leading" && !term.paused && keeper.isLeader();
  const role = (): HaRole => (term.kind === "leading" ? (isLeading() ? "leader" : "paused") : "standby");
  const quorum = (): boolean => (term.kind === "leading" ? keeper.isLeader() : members.writesOk());
  const leaderAddress = (): string | undefined => (leaderEntry?.holder === null || leaderEntry?.holder === holder ? undefined : leaderEntry?.address);

  const status = (): MessageInitShape<typeof GetHaStatusResponseSchema> => ({
    enabled: true,
    self: { holder, address: advertise, lastSeenMs: 0n, role: role() },
    leaderHolder: leaderEntry?.holder ?? "",
    leaderAddress: leaderEntry?.holder === holder ? advertise : (leaderEntry?.address ?? ""),
    epoch: BigInt(leaderEntry?.epoch ?? 0),
    leaseAgeMs: BigInt(Math.max(0, Math.round(clock.now() - leaderEntryAtMs))),
    standbys: members.others().map((m) => ({ holder: m.holder, address: m.address, lastSeenMs: BigInt(Math.max(0, Math.round(clock.now() - m.seenAtMs))), role: m.role })),
    quorum: quorum(),
    takeovers: BigInt(takeovers),
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

  const serveStandby = async (): Promise<void> => {
    if (closing || term.kind === "standby") return;
    const server = await startStandbyServer({ config: current, leaderAddress, status, haServing: true, log: hlog });
    term = { kind: "standby", server };
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
    enqueue("take the lead", async () => {
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
      if (term.kind === "standby") {
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
      const journal = await n.openJournal(undefined, { writerEpoch: held, onSuperseded: (newer, detail) => { onSuperseded(newer, detail); } });
      let inner: Coordinator;
      try {
        inner = await startCoordinator(current, {
          clock,
          ...(deps.rng === undefined ? {} : { rng: deps.rng }),
          logger: log,
          ha: { journal, state: n.state, leaderEpoch, onSuperseded: (newer, detail) => { onSuperseded(newer, detail); }, mayAct: () => held() !== undefined },
          haStatus: status,
        });
      } catch (err) {
        journal.close();
        throw err;
      }
      term = { kind: "leading", epoch, inner, journal, paused: false, fence };
      takeovers++;
      metrics.takeovers.inc();
      inner.server.health.set(haHealthService, ServingStatus.SERVING);
      hlog.info("leading", { epoch: epoch.toString(), address: inner.address, advertise, takeoverMs: Math.round(clock.now() - startedAt), previousHolder: previous?.holder ?? "" });
      await publishLeader(inner, epoch, previous, false);
      members.announce();
      // Lost while starting: the queued change after this one settles it.
      if (keeper.epoch() !== epochNum) onFollowerLike();
    });
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
  const members = new HaMembers({ kv: n.leaseKv, holder, address: advertise, role, isLeader: isLeading, intervalMs: ha.renewMs, opTimeoutMs: leaseOpTimeoutMs(ha), clock, log: hlog });
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
    if (t.kind === "standby") await t.server.close();
    await n.nc.close().catch(() => undefined);
    throw err;
  }
  members.start();
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
  const started = term as Term;
  hlog.info("ha member started", { holder, advertise, address: started.kind === "standby" ? started.server.address : config.listen, replicas: ha.replicas, leaseMs: ha.leaseMs, renewMs: ha.renewMs, marginMs: ha.marginMs, ...(metricsServer === undefined ? {} : { metricsAddress: metricsServer.address }) });

  let closed: Promise<void> | undefined;
  return {
    holder,
    advertise,
    metricsAddress: metricsServer?.address,
    failed,
    async reload(next) {
      const inner = { ...next, metricsListen: undefined };
      // Applied to the running term; a later term starts from it.
      if (term.kind === "leading") await term.inner.reload(inner);
      current = inner;
    },
    close(options = {}) {
      closed ??= (async () => {
        closing = true;
        await keeperRef.k?.stop();
        await members.stop();
        await queue;
        const t = term;
        term = { kind: "none" };
        if (t.kind === "leading") {
          await t.inner.close({ stopBackends: options.stopBackends ?? false });
          t.journal.close();
        }
        if (t.kind === "standby") await t.server.close();
        metricsServer?.server.close();
        await n.nc.close().catch(() => undefined);
      })();
      return closed;
    },
  };
}
