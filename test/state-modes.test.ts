/**
 * The state a coordinator and its embedded agent keep on disk is their
 * owner's only: directories 0700, files 0600 (the journal, backend records,
 * the leader-epoch fence, backend logs), checked with fs.stat on a real
 * coordinator process that loaded a model. One started on a state dir left
 * readable by others (made before Warden set modes, or by hand) tightens it
 * and says so in its log.
 */
import { chmod, mkdtemp, readdir, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AdminService } from "@warden/proto";
import { createClient } from "@warden/grpc";
import { simModel } from "./support/coordinator-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { testPortRange } from "./support/port-range.js";

let dir = "";

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-state-modes-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const modeOf = async (p: string): Promise<string> => `0${((await stat(p)).mode & 0o777).toString(8)}`;

/** Every directory and file under `root` (itself included) with its mode. */
async function modes(root: string): Promise<Record<string, string>> {
  const out: Record<string, string> = { ".": await modeOf(root) };
  const walk = async (d: string, rel: string): Promise<void> => {
    for (const e of await readdir(d, { withFileTypes: true })) {
      const r = rel === "" ? e.name : `${rel}/${e.name}`;
      if (e.isDirectory()) {
        out[`${r}/`] = await modeOf(join(d, e.name));
        await walk(join(d, e.name), r);
      } else if (e.isFile()) out[r] = await modeOf(join(d, e.name));
    }
  };
  await walk(root, "");
  return out;
}

function start(stateDir: string, name: string): Promise<CoordinatorProcess> {
  return startCoordinatorProcess(join(dir, `${name}.yaml`), {
    listen: "127.0.0.1:0",
    httpListen: "127.0.0.1:0",
    stateDir,
    embeddedAgent: true,
    agent: { nodeId: "local", ports: { ...testPortRange(), quarantine: "1s" }, readiness: { attempts: 100, interval: "200ms", initialInterval: "20ms" }, grace: "3s", nvidiaSmi: "", catalog: { "backend-sim": { builtin: "backend-sim" } } },
    recoveryWindow: "500ms",
    models: [simModel("m")],
  });
}

describe("state on disk", () => {
  it("is owner-only: directories 0700, files 0600, and a state dir left readable by others is tightened at start", async () => {
    const stateDir = join(dir, "state");
    const first = await start(stateDir, "first");
    const admin = createClient(AdminService, first.address);
    let checked = false;
    try {
      await admin.loadModel({ model: "m" }, { timeoutMs: 60_000 });
      const m = await modes(stateDir);
      // What is there: the journal, the agent's dir with a backend record and its logs, the HTTP upload dir.
      expect(Object.keys(m)).toEqual(expect.arrayContaining([".", "coordinator.journal", "agent/", "agent/logs/", "http-files/"]));
      expect(Object.keys(m).some((k) => /^agent\/[^/]+\.json$/.test(k))).toBe(true);
      expect(Object.keys(m).some((k) => k.startsWith("agent/logs/") && !k.endsWith("/"))).toBe(true);
      expect(Object.entries(m).filter(([k, v]) => v !== (k === "." || k.endsWith("/") ? "0700" : "0600"))).toEqual([]);
      checked = true;
    } finally {
      // Killed with its backend running, for the next start to adopt; on a failure here, nothing is left behind.
      if (!checked) await admin.unloadModel({ model: "m" }, { timeoutMs: 60_000 }).catch(() => undefined);
      await first.kill();
    }
    // Loosened by hand (or left so by an older version): every directory 0755, every file 0644.
    for (const k of Object.keys(await modes(stateDir))) await chmod(join(stateDir, k), k === "." || k.endsWith("/") ? 0o755 : 0o644);
    const second = await start(stateDir, "second");
    try {
      const m = await modes(stateDir);
      expect(Object.entries(m).filter(([k, v]) => v !== (k === "." || k.endsWith("/") ? "0700" : "0600"))).toEqual([]);
      const said = second.logLines.filter((l) => l["msg"] === "state readable by other users: tightened").map((l) => l["path"]);
      expect(said).toEqual(expect.arrayContaining([stateDir, join(stateDir, "coordinator.journal"), join(stateDir, "agent")]));
    } finally {
      // The backend the first one started (a killed coordinator leaves it running) was adopted: stop it.
      await createClient(AdminService, second.address).unloadModel({ model: "m" }, { timeoutMs: 60_000 }).catch(() => undefined);
      await second.kill();
    }
  });
});
