/**
 * A load held at the coordinator's admission gate — the recovery window after a start, while
 * nodes that may run backends report first — is a job like any other waiting load, against real
 * processes (a coordinator and the CLI): ListModels lists it waiting with the phase
 * WAITING_FOR_RECOVERY and the reason, a WatchEvents watcher sees load.waiting once, and
 * `warden models ls` prints "waiting for the recovery window: <reason>".
 */
import { spawnSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, LoadJobPhase, LoadJobState, type Event } from "@warden/proto";
import { simModel, until } from "./support/coordinator-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { freePort } from "./support/free-port.js";

const root = resolve(import.meta.dirname, "..");
const cliMain = join(root, "services", "cli", "src", "main.ts");

function warden(args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, ["--import", "tsx", cliMain, ...args], { cwd: root, env: { ...process.env, NO_COLOR: "1" }, encoding: "utf8", timeout: 120_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

let dir = "";
let coord: CoordinatorProcess | undefined;
let admin: Client<typeof AdminService> | undefined;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-load-recovery-"));
  coord = await startCoordinatorProcess(join(dir, "c.yaml"), {
    listen: `127.0.0.1:${String(await freePort())}`,
    stateDir: join(dir, "state"),
    // Remote agents may bring running backends: loads wait for the recovery window. The journal
    // names no node, so the window is its whole length — longer than this file runs.
    embeddedAgent: false,
    recoveryWindow: "10m",
    models: [simModel("m")],
  });
  admin = createClient(AdminService, coord.address);
}, 120_000);

afterAll(async () => {
  admin?.close();
  await coord?.kill();
  await rm(dir, { recursive: true, force: true });
}, 60_000);

describe("a load held by the recovery window is a job (real coordinator and CLI)", { timeout: 240_000 }, () => {
  it("listed waiting (WAITING_FOR_RECOVERY, with the reason) by ListModels and `models ls`; load.waiting once", async () => {
    const events: Event[] = [];
    const stopWatch = new AbortController();
    const call = new AbortController();
    try {
      void (async () => {
        for await (const r of admin!.watchEvents({ types: ["load.waiting"], nodeId: "", model: "m" }, { signal: stopWatch.signal })) if (r.event !== undefined) events.push(r.event);
      })().catch(() => undefined);
      const load = admin!.loadModel({ model: "m" }, { signal: call.signal }).catch(() => undefined);
      const job = await until("m's job", async () => (await admin!.listModels({})).replicas.find((r) => r.model === "m")?.loadJob, 60_000);
      expect(job).toMatchObject({ model: "m", state: LoadJobState.WAITING, phase: LoadJobPhase.WAITING_FOR_RECOVERY });
      expect(job.reason).toContain("recovery window");
      const waiting = await until("load.waiting of m", () => events.find((e) => e.payload.case === "loadWaiting"), 60_000);
      expect(waiting.payload.case === "loadWaiting" ? waiting.payload.value.loadIncarnation : "").toBe(job.incarnation);
      const ls = warden(["models", "ls", "--addr", coord!.address]);
      expect(ls.code, ls.stderr).toBe(0);
      expect(ls.stdout).toMatch(/^LOAD JOBS$/m);
      expect(ls.stdout).toMatch(/^m: waiting for the recovery window: .*recovery window/m);
      expect(events.filter((e) => e.payload.case === "loadWaiting")).toHaveLength(1);
      call.abort();
      await load;
    } finally {
      call.abort();
      stopWatch.abort();
    }
  });
});
