/**
 * A coordinator with `--config F --ha` as its own process, for the failover
 * bench: kill -9 is the point, so nothing here closes it gracefully except
 * `stop`. Started once it answers AdminService.GetHaStatus (leader and
 * standby both do, per the HA contract); `status` asks it again.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, type GetHaStatusResponse } from "@warden/proto";

const root = resolve(import.meta.dirname, "..", "..");
// The coordinator's own entry point (what `warden coordinator` runs), with the contract's `--ha`.
const coordinatorMain = join(root, "services", "coordinator", "src", "main.ts");

export interface HaCoordinatorProcess {
  readonly name: string;
  readonly address: string;
  readonly pid: number;
  readonly exited: Promise<void>;
  /** GetHaStatus from this member (undefined: no answer within `timeoutMs`). */
  status(timeoutMs?: number): Promise<GetHaStatusResponse | undefined>;
  /** SIGKILL; resolves once it exited. */
  kill(): Promise<void>;
  /** SIGTERM (SIGKILL after 15 s); resolves once it exited. */
  stop(): Promise<void>;
  /** SIGSTOP: it answers nothing, its timers do not fire (its kernel still accepts connections). */
  pause(): void;
  /** SIGCONT. */
  resume(): void;
  /** Whether the process has exited. */
  gone(): boolean;
}

export interface HaCoordinatorSpec {
  readonly name: string;
  /** host:port it listens on and advertises. */
  readonly address: string;
  readonly dir: string;
  readonly natsUrls: readonly string[];
  readonly models: readonly Record<string, unknown>[];
  /** Extra `ha:` settings (lease, renew, …). */
  readonly ha?: Record<string, unknown>;
  /** Extra top-level settings. */
  readonly extra?: Record<string, unknown>;
}

/** Writes `<dir>/<name>.yaml` (JSON is YAML) and starts the process; resolves once it answers GetHaStatus. */
export async function startHaCoordinator(s: HaCoordinatorSpec, timeoutMs = 90_000): Promise<HaCoordinatorProcess> {
  const configPath = join(s.dir, `${s.name}.yaml`);
  const config = {
    listen: s.address,
    stateDir: join(s.dir, `${s.name}-state`),
    embeddedAgent: false,
    nats: { url: s.natsUrls.join(",") },
    ha: { advertise: s.address, holder: s.name, ...s.ha },
    models: s.models,
    ...s.extra,
  };
  await writeFile(configPath, JSON.stringify(config, null, 2));
  const child: ChildProcess = spawn(process.execPath, ["--import", "tsx", coordinatorMain, "--config", configPath, "--ha", "--log-level", "warn"], {
    cwd: root,
    stdio: ["ignore", "ignore", "pipe"],
    env: { ...process.env, WARDEN_QUIET_BANNER: "1" },
  });
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  const exited = new Promise<void>((r) => {
    if (child.exitCode !== null || child.signalCode !== null) r();
    else
      child.once("exit", () => {
        r();
      });
  });
  const life = { gone: false };
  void exited.then(() => {
    life.gone = true;
  });
  const admin: Client<typeof AdminService> = createClient(AdminService, s.address);
  const status = async (ms = 1_000): Promise<GetHaStatusResponse | undefined> => admin.getHaStatus({}, { timeoutMs: ms }).catch(() => undefined);
  const kill = async (): Promise<void> => {
    if (!life.gone) child.kill("SIGKILL");
    await exited;
    admin.close();
  };
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if (life.gone) {
      admin.close();
      throw new Error(`${s.name} exited before answering GetHaStatus: ${stderr}`);
    }
    const r = await status();
    if (r?.enabled === true) break;
    if (performance.now() > deadline) {
      await kill();
      throw new Error(`${s.name} did not answer GetHaStatus within ${String(timeoutMs)} ms: ${stderr}`);
    }
    await new Promise((res) => setTimeout(res, 100));
  }
  return {
    name: s.name,
    address: s.address,
    pid: child.pid ?? 0,
    exited,
    status,
    kill,
    pause() {
      if (!life.gone) child.kill("SIGSTOP");
    },
    resume() {
      if (!life.gone) child.kill("SIGCONT");
    },
    gone: () => life.gone,
    async stop() {
      if (!life.gone) child.kill("SIGCONT");
      if (!life.gone) child.kill("SIGTERM");
      const t = setTimeout(() => child.kill("SIGKILL"), 15_000);
      await exited;
      clearTimeout(t);
      admin.close();
    },
  };
}

/** Polls `m.status()` until `pred` holds; throws after `timeoutMs`. */
export async function waitForHaStatus(m: HaCoordinatorProcess, what: string, pred: (r: GetHaStatusResponse) => boolean, timeoutMs = 60_000): Promise<GetHaStatusResponse> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const r = await m.status();
    if (r !== undefined && pred(r)) return r;
    if (performance.now() > deadline) throw new Error(`${m.name}: not ${what} within ${String(timeoutMs)} ms (last: role ${r?.self?.role ?? "no answer"}, leader ${r?.leaderHolder ?? "?"})`);
    await new Promise((res) => setTimeout(res, 100));
  }
}
