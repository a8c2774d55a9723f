/**
 * `npm run cluster`: a coordinator and three agents as separate processes on
 * loopback, each agent with distinct labels and a fake GPU inventory (a fake
 * nvidia-smi), for trying placement by hand. Ctrl-C stops everything,
 * backends included.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { runHaDevCluster } from "./dev-cluster-ha.js";

// Built (services/cli/dist/dev-cluster.js next to warden.js): run the bundle; from sources: tsx.
const bundled = !import.meta.url.endsWith(".ts");
const root = resolve(import.meta.dirname, "..", "..", "..");
const wardenArgs = bundled ? ["--enable-source-maps", join(import.meta.dirname, "warden.js")] : ["--import", "tsx", join(root, "services", "cli", "src", "main.ts")];

interface NodeSpec {
  readonly id: string;
  readonly labels: Record<string, string>;
  /** name, total MiB, used MiB per GPU */
  readonly gpus: readonly (readonly [string, number, number])[];
  readonly ports: readonly [number, number];
}

const nodes: readonly NodeSpec[] = [
  { id: "gpu-a", labels: { gpu: "a100", zone: "east" }, gpus: [["NVIDIA A100-SXM4-80GB", 81920, 2048], ["NVIDIA A100-SXM4-80GB", 81920, 1024]], ports: [22100, 22199] },
  { id: "gpu-b", labels: { gpu: "l4", zone: "east" }, gpus: [["NVIDIA L4", 23034, 512]], ports: [22200, 22299] },
  { id: "gpu-c", labels: { gpu: "t4", zone: "west" }, gpus: [["Tesla T4", 15360, 6144]], ports: [22300, 22399] },
];

/** A fake nvidia-smi answering the two queries the agent makes, with fixed numbers. */
function fakeNvidiaSmi(spec: NodeSpec): string {
  const gpuLines = spec.gpus.map(([name, total, used], i) => `${String(i)}, ${name}, ${String(total)}, ${String(used)}`).join("\\n");
  return `#!${process.execPath}
const args = process.argv.slice(2).join(" ");
if (args.includes("--query-gpu")) process.stdout.write("${gpuLines}\\n");
else if (args.includes("--query-compute-apps")) process.stdout.write("");
else { process.stderr.write("fake nvidia-smi: unsupported arguments\\n"); process.exit(2); }
`;
}

const models = `
  - id: llama-70b
    backend: backend-sim
    memoryEstimate: 40GiB
    selector: { gpu: a100 }
    groups: [large]
    options: ["sim.load_delay_ms:1500", "sim.predict_tokens:16"]
  - id: llama-8b
    backend: backend-sim
    memoryEstimate: 9GiB
    groups: [chat]
    options: ["sim.load_delay_ms:500"]
  - id: mistral-7b
    backend: backend-sim
    memoryEstimate: 8GiB
    groups: [chat]
    options: ["sim.load_delay_ms:500"]
  - id: whisper
    backend: backend-sim
    memoryEstimate: 3GiB
    selector: { zone: west }
    options: ["sim.load_delay_ms:300"]
  - id: embed
    backend: backend-sim
    memoryEstimate: 1GiB
    pinned: true
`;

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { listen: { type: "string", default: "127.0.0.1:50061" }, "http-listen": { type: "string", default: "127.0.0.1:8090" }, ha: { type: "boolean", default: false }, help: { type: "boolean", short: "h", default: false } } });
  if (values.help) {
    process.stdout.write(
      "usage: npm run cluster [-- --listen HOST:PORT] [-- --http-listen HOST:PORT] [-- --ha]\n\nStarts a coordinator and three agents (gpu-a: 2×A100 east, gpu-b: L4 east, gpu-c: T4 west) on loopback, with the dashboard and OpenAI API on --http-listen (default 127.0.0.1:8090; port 0 picks a free one).\n" +
        "--ha: three nats-servers in a JetStream cluster, two coordinators with --ha (--listen and the next port; HTTP on --http-listen, default 127.0.0.1:8090, and the next port, or free ports with port 0), the agents following both.\n",
    );
    return;
  }
  const dir = await mkdtemp(join(tmpdir(), "warden-cluster-"));
  const procs: ChildProcess[] = [];
  const prefix = (name: string, p: ChildProcess, streams: readonly ("stdout" | "stderr")[] = ["stdout", "stderr"]): void => {
    const tag = `[${name}] `;
    for (const s of streams.map((k) => p[k])) {
      let buf = "";
      s?.on("data", (b: Buffer) => {
        buf += b.toString();
        let nl = buf.indexOf("\n");
        while (nl >= 0) {
          process.stdout.write(tag + buf.slice(0, nl + 1));
          buf = buf.slice(nl + 1);
          nl = buf.indexOf("\n");
        }
      });
    }
  };
  const coordinatorYaml = (listen: string, stateDir: string): string =>
    `listen: ${listen}\nstateDir: ${stateDir}\nembeddedAgent: false\nplacement: binpack\npolicy:\n  limitPerNode: 3\n  idleCheck: true\n  idleTimeout: 5m\nmodels:${models}`;
  const startAgents = async (coordinators: string): Promise<ChildProcess[]> => {
    const started: ChildProcess[] = [];
    for (const n of nodes) {
      const smi = join(dir, `nvidia-smi-${n.id}`);
      await writeFile(smi, fakeNvidiaSmi(n));
      await chmod(smi, 0o755);
      // 0700 as the agent wants its state (it tightens and warns otherwise).
      await mkdir(join(dir, n.id), { recursive: true, mode: 0o700 });
      const labels = Object.entries(n.labels)
        .map(([k, v]) => `  ${k}: ${v}`)
        .join("\n");
      await writeFile(
        join(dir, `${n.id}.yaml`),
        `nodeId: ${n.id}\nlisten: 127.0.0.1:0\nlabels:\n${labels}\nstateDir: ${join(dir, n.id)}\nports: { min: ${String(n.ports[0])}, max: ${String(n.ports[1])} }\nnvidiaSmi: ${smi}\ngpus: [${n.gpus.map((_, i) => `"${String(i)}"`).join(", ")}]\ncatalog:\n  backend-sim: { builtin: backend-sim }\n`,
      );
      const a = spawn(process.execPath, [...wardenArgs, "agent", "--config", join(dir, `${n.id}.yaml`), "--coordinator", coordinators, "--stop-backends-on-exit"], { cwd: root, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, LOG_LEVEL: "warn" } });
      started.push(a);
      prefix(n.id, a);
    }
    return started;
  };
  if (values.ha) {
    process.exitCode = await runHaDevCluster({ dir, root, wardenArgs, listen: values.listen, httpListen: values["http-listen"], coordinatorYaml, startAgents, prefix });
    return;
  }
  await writeFile(join(dir, "coordinator.yaml"), coordinatorYaml(values.listen, join(dir, "coordinator")));
  // The coordinator's own banner would say "Ctrl-C stops the coordinator (backends keep
  // running)", which is not what Ctrl-C does here: this script prints the one banner.
  const coord = spawn(process.execPath, [...wardenArgs, "coordinator", "--config", join(dir, "coordinator.yaml"), "--log-pretty", "--http", values["http-listen"]], { cwd: root, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, WARDEN_QUIET_BANNER: "1" } });
  procs.push(coord);
  let banner = "";
  const listening = new Promise<boolean>((resolveListening) => {
    coord.stdout.on("data", (b: Buffer) => {
      banner += b.toString();
      if (banner.includes("State dir")) resolveListening(true);
    });
    coord.once("exit", () => {
      resolveListening(false);
    });
  });
  prefix("coordinator", coord, ["stderr"]);
  // Agents and "Try:" only once the coordinator listens, so the first command typed works.
  if (!(await listening)) {
    process.stderr.write(`the coordinator exited before it listened:\n${banner}`);
    await rm(dir, { recursive: true, force: true });
    process.exitCode = 1;
    return;
  }
  procs.push(...(await startAgents(values.listen)));
  // The coordinator's banner names the HTTP listener it got (port 0 picks a free one).
  const dashboard = /Dashboard\s+(\S+)/.exec(banner)?.[1] ?? "(off)";
  process.stdout.write(
    `\nWarden dev cluster: coordinator on ${values.listen}, agents gpu-a (2×A100, east), gpu-b (L4, east), gpu-c (T4, west).\n` +
      `Dashboard: ${dashboard}\nState and logs: ${dir} (removed when the cluster stops)\n` +
      `Try:\n  warden nodes ls --addr ${values.listen}\n  warden explain llama-70b --addr ${values.listen}\n  warden predict whisper "hi" --addr ${values.listen}\n  warden models ls --addr ${values.listen}\nCtrl-C stops everything.\n\n`,
  );
  let stopping = false;
  const stop = (): void => {
    if (stopping) return;
    stopping = true;
    // Agents first (they stop their backends), then the coordinator.
    const agents = procs.slice(1);
    for (const p of agents) p.kill("SIGTERM");
    const exited = (p: ChildProcess): Promise<void> =>
      new Promise((r) => {
        if (p.exitCode !== null) r();
        else p.once("exit", () => {
          r();
        });
      });
    void Promise.all(agents.map(exited)).then(async () => {
      coord.kill("SIGTERM");
      await exited(coord);
      await rm(dir, { recursive: true, force: true });
      process.exit(0);
    });
  };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
}

await main();
