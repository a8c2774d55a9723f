/**
 * `npm run cluster -- --ha`: the dev cluster with coordinator HA —
 * three nats-servers in one JetStream cluster, two `warden coordinator --ha`
 * (coord-a on --listen, coord-b on the next port; HTTP on --http-listen and the
 * next port, or each a free port with port 0) and the agents following both
 * (`--coordinator a,b`). Ctrl-C stops what this started, in order:
 * agents (they stop their backends), coordinators, nats-servers; then the
 * temp dir goes.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { createClient } from "@warden/grpc";
import { AdminService } from "@warden/proto";
import { natsServerBinary, startDevNatsCluster, type DevNatsCluster } from "./dev-cluster-nats.js";

export interface HaDevClusterOptions {
  readonly dir: string;
  readonly root: string;
  /** How to run `warden` (node arguments before the command). */
  readonly wardenArgs: readonly string[];
  /** coord-a's listen address; coord-b takes the next port. */
  readonly listen: string;
  /** coord-a's HTTP listen address (OpenAI API, dashboard); coord-b takes the next port (port 0: each a free one). */
  readonly httpListen: string;
  /** The dev cluster's coordinator YAML (models, policy) for one listen address and state dir, without nats: or ha:. */
  readonly coordinatorYaml: (listen: string, stateDir: string) => string;
  /** Starts the dev cluster's agents against `coordinators` ("a,b"). */
  readonly startAgents: (coordinators: string) => Promise<ChildProcess[]>;
  /** Copies a process's output lines to stdout, tagged with `name`. */
  readonly prefix: (name: string, p: ChildProcess, streams?: readonly ("stdout" | "stderr")[]) => void;
}

const exitedOf = (p: ChildProcess): Promise<void> =>
  new Promise((r) => {
    if (p.exitCode !== null || p.signalCode !== null) r();
    else
      p.once("exit", () => {
        r();
      });
  });

function nextPort(listen: string, flag: string, zeroOk = false): string {
  const i = listen.lastIndexOf(":");
  const port = Number(listen.slice(i + 1));
  if (zeroOk && i >= 0 && port === 0 && listen.slice(i + 1) === "0") return listen;
  if (i < 0 || !Number.isInteger(port) || port < 1 || port > 65534) throw new RangeError(`${flag}: "${listen}" is not host:port with a port below 65535`);
  return `${listen.slice(0, i)}:${String(port + 1)}`;
}

/**
 * Polls GetHaStatus on `address` until `pred` holds for the member's role and
 * it announces its HTTP URL, or `p` exits: that URL (the one `warden ha status`
 * and the standby's HTTP answers name), or undefined if it exited or
 * `timeoutMs` passed.
 */
async function waitForStatus(address: string, p: ChildProcess, pred: (role: string) => boolean, timeoutMs: number): Promise<string | undefined> {
  const admin = createClient(AdminService, address);
  const deadline = Date.now() + timeoutMs;
  try {
    while (Date.now() < deadline && p.exitCode === null && p.signalCode === null) {
      const r = await admin.getHaStatus({}, { timeoutMs: 1_000 }).catch(() => undefined);
      if (r?.enabled === true && pred(r.self?.role ?? "") && r.self?.httpUrl !== undefined && r.self.httpUrl !== "") return r.self.httpUrl;
      await new Promise((res) => setTimeout(res, 200));
    }
    return undefined;
  } finally {
    admin.close();
  }
}

export async function runHaDevCluster(o: HaDevClusterOptions): Promise<number> {
  const bin = natsServerBinary();
  if (bin === undefined) {
    process.stderr.write("--ha needs nats-server: apt-get install -y nats-server (or set NATS_SERVER_BIN)\n");
    return 1;
  }
  const nats: ChildProcess[] = [];
  const coordinators: ChildProcess[] = [];
  let agents: ChildProcess[] = [];
  const run = { stopping: false };
  // A call, so the compiler does not narrow it across the awaits a Ctrl-C can interrupt.
  const stopped = (): boolean => run.stopping;
  const stopAll = async (): Promise<void> => {
    // Agents first (they stop their backends), then the coordinators, then NATS.
    for (const group of [agents, coordinators, nats]) {
      for (const p of group) p.kill("SIGTERM");
      await Promise.all(group.map(exitedOf));
    }
    await rm(o.dir, { recursive: true, force: true });
  };
  const stop = (): void => {
    if (run.stopping) return;
    run.stopping = true;
    void stopAll().then(() => process.exit(0));
  };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);

  const fail = async (why: string): Promise<number> => {
    process.stderr.write(`${why}\n`);
    run.stopping = true;
    await stopAll();
    return 1;
  };
  const natsTail = new Map<string, string>();
  let cluster: DevNatsCluster;
  try {
    cluster = await startDevNatsCluster({
      dir: o.dir,
      bin,
      onSpawn: (name, p) => {
        nats.push(p);
        // nats-server logs every route and client at INF: kept, not shown, unless it fails to start.
        p.stderr?.on("data", (d: Buffer) => natsTail.set(name, ((natsTail.get(name) ?? "") + d.toString()).slice(-2000)));
        p.stdout?.resume();
      },
    });
  } catch (err) {
    return fail(`the nats-server cluster did not start: ${err instanceof Error ? err.message : String(err)}\n${[...natsTail].map(([n, t]) => `--- ${n}\n${t}`).join("\n")}`);
  }
  if (stopped()) return 0;

  let addrs: readonly [string, string];
  let https: readonly [string, string];
  try {
    addrs = [o.listen, nextPort(o.listen, "--listen")];
    https = [o.httpListen, nextPort(o.httpListen, "--http-listen", true)];
  } catch (err) {
    return fail(err instanceof Error ? err.message : String(err));
  }
  const members = [
    { name: "coord-a", address: addrs[0], http: https[0], role: "leader" },
    { name: "coord-b", address: addrs[1], http: https[1], role: "standby" },
  ] as const;
  const urls: string[] = [];
  for (const { name, address, http, role: expected } of members) {
    const file = join(o.dir, `${name}.yaml`);
    await writeFile(file, `${o.coordinatorYaml(address, join(o.dir, name))}\nhttpListen: ${http}\nnats:\n  url: ${cluster.url}\nha:\n  advertise: ${address}\n  holder: ${name}\n`);
    const c = spawn(process.execPath, [...o.wardenArgs, "coordinator", "--config", file, "--ha", "--log-pretty"], { cwd: o.root, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, WARDEN_QUIET_BANNER: "1" } });
    coordinators.push(c);
    o.prefix(name, c);
    // coord-a first, so it is the one that leads (the order only makes the printout predictable).
    const url = await waitForStatus(address, c, (role) => role === expected, 90_000);
    if (stopped()) return 0;
    if (url === undefined) return fail(`${name} did not become ${expected} with its HTTP listener within 90 s (see its log above)`);
    urls.push(url);
  }
  agents = await o.startAgents(addrs.join(","));
  const both = addrs.join(",");
  process.stdout.write(
    `\nWarden dev cluster with HA: JetStream cluster ${cluster.url}\n` +
      `  coord-a (leader)  ${addrs[0]}  HTTP ${String(urls[0])}  pid ${String(coordinators[0]?.pid)}\n` +
      `  coord-b (standby) ${addrs[1]}  HTTP ${String(urls[1])}  pid ${String(coordinators[1]?.pid)}\n` +
      // Either URL works: a standby redirects the dashboard to the leader's and names it in its 503s.
      `  dashboard ${String(urls[0])}/ (follows the leader; OpenAI API at <url>/v1)\n` +
      `  nats-servers pids ${nats.map((p) => String(p.pid)).join(", ")} (configs: ${cluster.configFiles.join(", ")})\n` +
      `  agents gpu-a, gpu-b, gpu-c follow --coordinator ${both}\n` +
      // ha status per member: each answers for itself (its role, the lease as it sees it).
      `Try:\n  warden ha status --addr ${addrs[0]}\n  warden ha status --addr ${addrs[1]}\n  warden nodes ls --addr ${both}\n  warden predict whisper "hi" --addr ${both}\n` +
      `  curl -i ${String(urls[1])}/v1/models   # the standby: 503, Warden-Leader names coord-a's URL\n` +
      `  kill -9 ${String(coordinators[0]?.pid)}   # the leader; coord-b takes over within a lease (3 s) + recovery window; the dashboard moves to ${String(urls[1])}\n` +
      `Ctrl-C stops everything.\n\n`,
  );
  return 0;
}
