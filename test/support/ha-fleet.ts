/**
 * The HA tests' shared set-up, real processes: a private 3-server nats-server
 * JetStream cluster, `warden coordinator --ha` members started one by one as
 * child processes (the real CLI), and remote agents given a list of member
 * addresses. A member gets a fresh loopback address, its own state dir and
 * config file, the test lease (2 s, renew 500 ms, margin 400 ms), a 500 ms
 * recovery window and a 120 s node grace; the test adds the rest (models,
 * policy, an HTTP listener). `reset` ends what a test started and empties the
 * HA streams, so the next test starts from no journal, lease or state;
 * `close` removes everything, and only what this fleet started.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { jetstreamManager } from "@nats-io/jetstream";
import { connectAudit } from "@warden/audit";
import { startRemoteAgent, type RemoteAgent } from "./agent-process.js";
import { freePort } from "./free-port.js";
import { startHaCoordinator, type HaCoordinatorProcess } from "./ha-coordinator-process.js";
import { startNatsCluster, type NatsClusterHandle } from "./nats-cluster.js";

/** The streams an HA cluster creates: the journal, the lease bucket's and the state bucket's. */
export const haStreams = ["WARDEN_JOURNAL", "KV_warden-leader", "KV_warden-state"] as const;

export interface HaFleetMember extends HaCoordinatorProcess {
  /** http://host:port of its `httpListen`, when it was given one (`http: true`). */
  readonly httpUrl: string | undefined;
}

export interface HaMemberOptions {
  /** The lease holder name, used as given (see `holderOf`). */
  readonly holder: string;
  /** Merged over the member defaults (top-level keys replace theirs). */
  readonly config?: Record<string, unknown>;
  /** An HTTP listener (OpenAI API, dashboard) on a fresh loopback port. */
  readonly http?: boolean;
  readonly args?: readonly string[];
  /** How long the start may take before it fails. @default 60000 */
  readonly startTimeoutMs?: number;
  /** Sees every JSON log line as it comes, from the first. */
  readonly onLine?: (l: Record<string, unknown>) => void;
}

export interface HaFleet {
  readonly nats: NatsClusterHandle;
  readonly dir: string;
  /** Members started since the last reset, in start order. */
  readonly members: readonly HaFleetMember[];
  member(o: HaMemberOptions): Promise<HaFleetMember>;
  /** A remote agent following `coordinators` (member addresses, in the order it tries them); ended by `reset`. */
  agent(o: { readonly nodeId: string; readonly tag: string; readonly coordinators: readonly string[]; readonly config?: Record<string, unknown> }): Promise<RemoteAgent>;
  /** Ends the agents (and their backends) and members started since the last reset, starts again any nats-server that is down, and deletes the HA streams. */
  reset(): Promise<void>;
  close(): Promise<void>;
}

/** A tag made a lease holder name: at most 40 characters of [A-Za-z0-9_-]. */
export function holderOf(tag: string): string {
  return tag.slice(0, 40).replace(/[^A-Za-z0-9_-]/g, "-");
}

export async function startHaFleet(name: string): Promise<HaFleet> {
  const nats = await startNatsCluster();
  const dir = await mkdtemp(join(tmpdir(), `warden-${name}-`));
  const members: HaFleetMember[] = [];
  const agents: RemoteAgent[] = [];
  let seq = 0;
  const fleet: HaFleet = {
    nats,
    dir,
    members,
    async member(o) {
      const n = seq++;
      const http = o.http === true ? `127.0.0.1:${String(await freePort())}` : undefined;
      const proc = await startHaCoordinator(join(dir, `coord-${String(n)}.yaml`), {
        listen: `127.0.0.1:${String(await freePort())}`,
        ...(http === undefined ? {} : { httpListen: http }),
        stateDir: join(dir, `state-${String(n)}`),
        embeddedAgent: false,
        recoveryWindow: "500ms",
        nodeGrace: "120s",
        nats: { url: nats.urls.join(",") },
        ha: { holder: o.holder, lease: "2s", renew: "500ms", margin: "400ms" },
        ...o.config,
      }, o.args ?? [], o.startTimeoutMs, o.onLine);
      const m: HaFleetMember = { ...proc, httpUrl: http === undefined ? undefined : `http://${http}` };
      members.push(m);
      return m;
    },
    async agent(o) {
      const a = await startRemoteAgent({ coordinator: o.coordinators.join(","), nodeId: o.nodeId, tag: o.tag, ...(o.config === undefined ? {} : { config: o.config }) });
      agents.push(a);
      return a;
    },
    async reset() {
      for (const a of agents.splice(0)) await a.cleanup();
      for (const m of members.splice(0)) {
        m.child.kill("SIGCONT");
        await m.kill();
      }
      for (let i = 0; i < nats.servers.length; i++) if (!nats.running(i)) await nats.restart(i);
      const nc = await connectAudit({ servers: [...nats.urls], name: `${name}-reset` });
      try {
        const jsm = await jetstreamManager(nc);
        for (const stream of haStreams) await jsm.streams.delete(stream).catch(() => undefined);
      } finally {
        await nc.close();
      }
    },
    async close() {
      for (const a of agents.splice(0)) await a.cleanup();
      for (const m of members.splice(0)) {
        m.child.kill("SIGCONT");
        await m.kill();
      }
      await nats.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
  return fleet;
}
