/**
 * A `warden up` in its own process (as in production) for the routing
 * benches, with a data-plane listener and one backend-sim model `m`, so the
 * callers in the bench process do the same work on both sides.
 */
import { spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { freePort } from "../support/free-port.js";

export interface BenchCoordinator {
  /** The main port (grpc-js, every service). */
  readonly address: string;
  /** The data-plane listener (lean HTTP/2, InferenceService only). */
  readonly dataPlane: string;
  /** The HTTP listener (OpenAI-compatible API), on a free port: never `warden up`'s default 8080. */
  readonly http: string;
  /** The coordinator process (for /proc CPU figures). */
  readonly pid: number;
  /** SIGINT, wait for the exit, remove the state dir. */
  close(): Promise<void>;
}

/** Another model table or more embedded-agent settings than the routing benches' one model `m`. */
export interface BenchCoordinatorSetup {
  /** YAML flow maps, one per model (replaces model `m`). */
  readonly models?: readonly string[];
  /** YAML flow-map entries added to the embedded agent's (e.g. "maxReplicasPerModel: 4"). */
  readonly agent?: string;
  /** More top-level YAML lines (e.g. "auth: { tokensFile: /tmp/x }"). */
  readonly top?: string;
  /** Run `warden up` from this checkout instead of this one (a before/after comparison in one run; its backends on the 50 ports after this one's). */
  readonly root?: string;
}

/**
 * Node flags for each process the routing benches start (coordinators, the
 * bare forwarder): WARDEN_BENCH_CPU_PROF_DIR, a V8 CPU profile of each,
 * written there when it exits; WARDEN_BENCH_NODE_FLAGS, any other flags
 * (space-separated, e.g. `--heap-prof --heap-prof-dir /tmp/h`), the same for all.
 */
export function cpuProfArgs(): string[] {
  const dir = process.env.WARDEN_BENCH_CPU_PROF_DIR;
  const extra = (process.env.WARDEN_BENCH_NODE_FLAGS ?? "").split(" ").filter((f) => f !== "");
  return [...extra, ...(dir === undefined || dir === "" ? [] : ["--cpu-prof", "--cpu-prof-dir", dir])];
}

/**
 * `defaultPortMin`: where the embedded agent's backend ports start unless
 * WARDEN_TEST_PORT_BASE is set (side-by-side checkouts keep apart).
 */
export async function startBenchCoordinator(tag: string, defaultPortMin: number, tls?: { readonly certsDir: string }, setup: BenchCoordinatorSetup = {}): Promise<BenchCoordinator> {
  const dir = await mkdtemp(join(tmpdir(), `warden-bench-${tag}-`));
  const address = `127.0.0.1:${String(await freePort())}`;
  const dataPlane = `127.0.0.1:${String(await freePort())}`;
  const http = `127.0.0.1:${String(await freePort())}`;
  // Another checkout's coordinator in the same run takes the next 50 ports for its backends.
  const portMin = Number(process.env.WARDEN_TEST_PORT_BASE ?? String(defaultPortMin)) + (setup.root === undefined ? 0 : 50);
  // With `tls`: both hops over TLS, the callers' (coordinator certificate) and the
  // coordinator's to the backend (backend-sim serving an agent certificate, verified by the CA).
  const c = tls?.certsDir;
  const tlsYaml =
    c === undefined
      ? ""
      : `tls: { cert: ${join(c, "coordinator.pem")}, key: ${join(c, "coordinator-key.pem")} }\nbackendTls: { ca: ${join(c, "ca.pem")}, backends: [backend-sim] }\n`;
  const catalog = c === undefined ? "" : `, catalog: { backend-sim: { builtin: backend-sim, env: { BACKEND_SIM_TLS_CERT: ${join(c, "bench-backend.pem")}, BACKEND_SIM_TLS_KEY: ${join(c, "bench-backend-key.pem")} }, tls: { ca: ${join(c, "ca.pem")} } } }`;
  await writeFile(join(dir, "c.yaml"), `listen: ${address}\ninferenceListen: ${dataPlane}\nhttpListen: ${http}\nstateDir: ${join(dir, "state")}\n${tlsYaml}agent: { ports: { min: ${String(portMin)}, max: ${String(portMin + 49)} }, nvidiaSmi: ""${catalog}${setup.agent === undefined ? "" : `, ${setup.agent}`} }\n${setup.top === undefined ? "" : `${setup.top}\n`}models:\n${(setup.models ?? ['{ id: m, backend: backend-sim, options: ["sim.predict_tokens:1"] }']).map((m) => `  - ${m}\n`).join("")}`);
  const root = setup.root ?? resolve(import.meta.dirname, "..", "..");
  const child = spawn(process.execPath, [...cpuProfArgs(), "--import", "tsx", join(root, "services/cli/src/main.ts"), "up", "--config", join(dir, "c.yaml"), "--log-level", "warn"], { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout.on("data", (b: Buffer) => (out += b.toString()));
  // The banner comes on stderr under JSON logs; what follows it (a crash) passes through to the bench's stderr.
  child.stderr.on("data", (b: Buffer) => {
    const seen = out.includes("Warden is running");
    out += b.toString();
    if (seen) process.stderr.write(b);
  });
  for (let i = 0; i < 900 && !out.includes("Warden is running"); i++) await new Promise((r) => setTimeout(r, 100));
  return {
    address,
    dataPlane,
    http,
    pid: child.pid ?? 0,
    async close() {
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGINT");
      await exited;
      await rm(dir, { recursive: true, force: true });
    },
  };
}
