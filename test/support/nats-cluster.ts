/**
 * A private 3-server nats-server JetStream cluster for one test file, on
 * loopback: random free client, cluster-route and monitoring ports, a private
 * store dir per server. `start` returns once JetStream has a meta leader that
 * every server agrees on. Servers are killed (SIGKILL) or restarted by index;
 * only the processes started here are ever signalled, and any left running are
 * SIGKILLed when the test process exits.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { get as httpGet } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "./free-port.js";
import { natsServerBinary } from "./nats-server.js";

export interface NatsClusterServer {
  readonly name: string;
  readonly url: string;
  readonly port: number;
  readonly clusterPort: number;
  readonly httpPort: number;
  readonly storeDir: string;
}

export interface NatsClusterHandle {
  readonly servers: readonly NatsClusterServer[];
  /** Client URLs of all servers, for a connection that fails over. */
  readonly urls: readonly string[];
  running(index: number): boolean;
  /** SIGKILL one server (a crash; its store dir stays) and wait for it to exit. */
  kill(index: number): Promise<void>;
  /** Start a stopped server again on the same ports and store, and wait until it is back in the meta group. */
  restart(index: number): Promise<void>;
  /** Resolves once every running server reports the same JetStream meta leader. */
  waitForMetaLeader(timeoutMs?: number): Promise<string>;
  /** SIGTERM all (SIGKILL after 10 s), wait for the exits, delete the store dirs. */
  stop(): Promise<void>;
  /**
   * What each running server says of the JetStream meta group and every stream
   * (leader, replicas current or lagging), and its last stderr: the account of
   * a test that waited for a stream in vain.
   */
  describe(): Promise<string>;
}

const live = new Set<ChildProcess>();
process.on("exit", () => {
  for (const p of live) p.kill("SIGKILL");
});

const pollMs = 50;

function fetchJson(port: number, path: string): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const req = httpGet({ host: "127.0.0.1", port, path, timeout: 2_000 }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (body += d));
      res.on("end", () => {
        try {
          resolve(JSON.parse(body));
        } catch (err) {
          reject(err instanceof Error ? err : new Error(String(err)));
        }
      });
    });
    req.on("timeout", () => req.destroy(new Error("monitoring request timed out")));
    req.on("error", reject);
  });
}

interface StreamDetail {
  readonly name?: string;
  readonly cluster?: { readonly leader?: string; readonly replicas?: readonly { readonly name?: string; readonly current?: boolean; readonly lag?: number; readonly offline?: boolean }[] };
  readonly state?: { readonly messages?: number; readonly last_seq?: number };
}

/** One line per stream as server `httpPort` sees it. */
async function streamsOf(httpPort: number): Promise<string> {
  try {
    const jsz = (await fetchJson(httpPort, "/jsz?streams=1")) as { meta_cluster?: { leader?: string }; account_details?: readonly { stream_detail?: readonly StreamDetail[] }[] };
    const streams = (jsz.account_details ?? []).flatMap((a) => a.stream_detail ?? []);
    const lines = streams.map((d) => {
      const replicas = (d.cluster?.replicas ?? []).map((r) => `${r.name ?? "?"}${r.current === true ? "" : "(behind)"}${r.offline === true ? "(offline)" : ""}${r.lag === undefined || r.lag === 0 ? "" : `(lag ${String(r.lag)})`}`);
      return `  ${d.name ?? "?"}: leader ${d.cluster?.leader ?? "none"}, replicas [${replicas.join(" ")}], last_seq ${String(d.state?.last_seq ?? "?")}`;
    });
    return [`meta leader ${jsz.meta_cluster?.leader ?? "none"}`, ...lines].join("\n");
  } catch (err) {
    return `not answering: ${String(err)}`;
  }
}

/** The meta leader this server reports, or undefined (none yet, or not answering). */
async function metaLeaderOf(httpPort: number): Promise<string | undefined> {
  try {
    const jsz = (await fetchJson(httpPort, "/jsz")) as { meta_cluster?: { leader?: string; cluster_size?: number } };
    const leader = jsz.meta_cluster?.leader;
    return leader === undefined || leader === "" ? undefined : leader;
  } catch {
    return undefined;
  }
}

function configText(s: NatsClusterServer, all: readonly NatsClusterServer[], clusterName: string, extra: readonly string[] = []): string {
  const routes = all.map((o) => `nats-route://127.0.0.1:${o.clusterPort}`).join(", ");
  return [
    `server_name: ${s.name}`,
    `listen: 127.0.0.1:${s.port}`,
    `http: 127.0.0.1:${s.httpPort}`,
    `jetstream { store_dir: "${s.storeDir}" }`,
    `cluster { name: ${clusterName}, listen: 127.0.0.1:${s.clusterPort}, routes: [${routes}] }`,
    ...extra,
    "",
  ].join("\n");
}

/** `extraConfig`: more lines of every server's config (e.g. `ping_interval: "2s"`). */
export async function startNatsCluster(options: { readonly size?: number; readonly startTimeoutMs?: number; readonly extraConfig?: readonly string[] } = {}): Promise<NatsClusterHandle> {
  const size = options.size ?? 3;
  const timeoutMs = options.startTimeoutMs ?? 60_000;
  const bin = natsServerBinary();
  const root = await mkdtemp(join(tmpdir(), "warden-nats-cluster-"));
  const clusterName = `warden-${String(process.pid)}`;
  const servers: NatsClusterServer[] = [];
  // Distinct ports: three lookups at once could hand out the same just-freed port.
  const taken = new Set<number>();
  const pick = async (): Promise<number> => {
    for (;;) {
      const p = await freePort();
      if (!taken.has(p)) {
        taken.add(p);
        return p;
      }
    }
  };
  for (let i = 0; i < size; i++) {
    const port = await pick();
    servers.push({
      name: `n${String(i)}`,
      url: `nats://127.0.0.1:${String(port)}`,
      port,
      clusterPort: await pick(),
      httpPort: await pick(),
      storeDir: join(root, `n${String(i)}`),
    });
  }
  const configs = servers.map((s) => join(root, `${s.name}.conf`));
  await Promise.all(servers.map((s, i) => writeFile(configs[i]!, configText(s, servers, clusterName, options.extraConfig))));

  const procs: (ChildProcess | undefined)[] = servers.map(() => undefined);
  const exits: Promise<void>[] = servers.map(() => Promise.resolve());
  const stderr: string[] = servers.map(() => "");

  const spawnServer = (i: number): void => {
    if (procs[i] !== undefined) throw new Error(`nats-server ${String(i)} already running`);
    const p = spawn(bin, ["-c", configs[i]!], { stdio: ["ignore", "ignore", "pipe"] });
    procs[i] = p;
    live.add(p);
    p.stderr.on("data", (d: Buffer) => {
      stderr[i] = (stderr[i]! + d.toString()).slice(-4000);
    });
    exits[i] = new Promise((resolve) => {
      p.once("exit", () => {
        live.delete(p);
        if (procs[i] === p) procs[i] = undefined;
        resolve();
      });
    });
  };

  const running = (i: number): boolean => procs[i] !== undefined;

  const waitForMetaLeader = async (waitMs = timeoutMs): Promise<string> => {
    const deadline = Date.now() + waitMs;
    for (;;) {
      const up = servers.filter((_, i) => running(i));
      const leaders = await Promise.all(up.map((s) => metaLeaderOf(s.httpPort)));
      const first = leaders[0];
      // A server that was just killed can still be named by the others for a moment.
      const leaderUp = up.some((s) => s.name === first);
      if (first !== undefined && leaderUp && leaders.every((l) => l === first)) return first;
      if (Date.now() > deadline) {
        throw new Error(`no agreed JetStream meta leader within ${String(waitMs)} ms (${leaders.join(",")}): ${stderr.join("\n---\n")}`);
      }
      await new Promise((r) => setTimeout(r, pollMs));
    }
  };

  const kill = async (i: number): Promise<void> => {
    const p = procs[i];
    if (p === undefined) return;
    p.kill("SIGKILL");
    await exits[i];
  };

  const stop = async (): Promise<void> => {
    await Promise.all(
      procs.map(async (p, i) => {
        if (p === undefined) return;
        p.kill("SIGTERM");
        const killer = setTimeout(() => p.kill("SIGKILL"), 10_000);
        await exits[i];
        clearTimeout(killer);
      }),
    );
    await rm(root, { recursive: true, force: true });
  };

  try {
    for (let i = 0; i < size; i++) spawnServer(i);
    await waitForMetaLeader();
  } catch (err) {
    await stop();
    throw err;
  }

  return {
    servers,
    urls: servers.map((s) => s.url),
    running,
    kill,
    async restart(i) {
      spawnServer(i);
      await waitForMetaLeader();
    },
    waitForMetaLeader,
    stop,
    async describe() {
      const parts = await Promise.all(servers.map(async (s, i) => (running(i) ? `${s.name}: ${await streamsOf(s.httpPort)}\n  stderr: ${stderr[i]!.slice(-600)}` : `${s.name}: not running`)));
      return parts.join("\n");
    },
  };
}
