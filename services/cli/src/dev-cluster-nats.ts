/**
 * `npm run cluster -- --ha`'s NATS side: three nats-server processes in one
 * JetStream cluster on loopback, each on free ports with a private store dir
 * under the dev cluster's temp dir. Resolves once every server names the same
 * JetStream meta leader (before that, a coordinator's first stream or bucket
 * request would fail). Only these processes are ever signalled.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { get as httpGet } from "node:http";
import { createServer } from "node:net";
import { join } from "node:path";
import { natsClusterConfigText, natsClusterUrl, type NatsClusterMember } from "./nats-cluster-config.js";

export interface DevNatsCluster {
  readonly members: readonly NatsClusterMember[];
  /** The coordinators' `nats.url` (comma-separated). */
  readonly url: string;
  readonly procs: readonly ChildProcess[];
  /** The config file of each member (printed for the operator to read). */
  readonly configFiles: readonly string[];
}

/** $NATS_SERVER_BIN, else `nats-server` on PATH, else /usr/sbin/nats-server (Debian's package). */
export function natsServerBinary(): string | undefined {
  const fromEnv = process.env["NATS_SERVER_BIN"];
  if (fromEnv !== undefined && fromEnv !== "") return fromEnv;
  const which = spawnSync("sh", ["-c", "command -v nats-server"], { encoding: "utf8" });
  const onPath = which.stdout.trim();
  if (which.status === 0 && onPath !== "") return onPath;
  return existsSync("/usr/sbin/nats-server") ? "/usr/sbin/nats-server" : undefined;
}

/** A loopback TCP port that was free a moment ago. */
/**
 * Ports this process already handed out: the kernel may give the same free port to two lookups in
 * a row (nothing listens on it yet), and two listeners of one cluster must never share one (an HA
 * member whose HTTP and gRPC ports collided never competed for the lease). Bounded: the oldest are
 * forgotten first.
 */
const handedOut = new Set<number>();
const maxRemembered = 4_096;

function bindZero(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      const port = typeof a === "object" && a !== null ? a.port : 0;
      s.close(() => {
        resolve(port);
      });
    });
  });
}

/** A loopback port nothing listens on now and that this process has not handed out before. */
export async function freeLoopbackPort(): Promise<number> {
  for (let attempt = 0; ; attempt++) {
    const port = await bindZero();
    if (!handedOut.has(port) || attempt >= 64) {
      handedOut.add(port);
      if (handedOut.size > maxRemembered) handedOut.delete(handedOut.values().next().value as number);
      return port;
    }
  }
}

function metaLeaderOf(httpPort: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    const req = httpGet({ host: "127.0.0.1", port: httpPort, path: "/jsz", timeout: 2_000 }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (body += d));
      res.on("end", () => {
        try {
          const leader = (JSON.parse(body) as { meta_cluster?: { leader?: string } }).meta_cluster?.leader;
          resolve(leader === "" ? undefined : leader);
        } catch {
          resolve(undefined);
        }
      });
    });
    req.on("timeout", () => req.destroy());
    req.on("error", () => {
      resolve(undefined);
    });
  });
}

/**
 * Starts the three servers; `onSpawn` gets each process at once (the caller
 * owns stopping them, also when this rejects). Rejects if a server exits or
 * no meta leader is agreed within `timeoutMs`.
 */
export async function startDevNatsCluster(o: { readonly dir: string; readonly bin: string; readonly onSpawn: (name: string, p: ChildProcess) => void; readonly timeoutMs?: number }): Promise<DevNatsCluster> {
  const taken = new Set<number>();
  const pick = async (): Promise<number> => {
    for (;;) {
      const p = await freeLoopbackPort();
      if (!taken.has(p)) {
        taken.add(p);
        return p;
      }
    }
  };
  const members: NatsClusterMember[] = [];
  for (const name of ["nats-1", "nats-2", "nats-3"]) {
    members.push({ name, host: "127.0.0.1", port: await pick(), clusterPort: await pick(), httpPort: await pick(), storeDir: join(o.dir, name, "jetstream") });
  }
  const configFiles = members.map((m) => join(o.dir, `${m.name}.conf`));
  const procs: ChildProcess[] = [];
  let exited: string | undefined;
  for (const m of members) {
    const file = join(o.dir, `${m.name}.conf`);
    await mkdir(m.storeDir, { recursive: true });
    await writeFile(file, natsClusterConfigText(m, members, "warden-dev"));
    const p = spawn(o.bin, ["-c", file], { stdio: ["ignore", "pipe", "pipe"] });
    p.once("exit", (code, sig) => {
      exited ??= `${m.name} exited (${sig ?? String(code)})`;
    });
    procs.push(p);
    o.onSpawn(m.name, p);
  }
  const deadline = Date.now() + (o.timeoutMs ?? 60_000);
  for (;;) {
    if (exited !== undefined) throw new Error(exited);
    const leaders = await Promise.all(members.map((m) => metaLeaderOf(m.httpPort)));
    if (leaders[0] !== undefined && leaders.every((l) => l === leaders[0])) break;
    if (Date.now() > deadline) throw new Error(`no JetStream meta leader agreed by all three servers (saw ${leaders.map(String).join(", ")})`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return { members, url: natsClusterUrl(members), procs, configFiles };
}
