/**
 * Load jobs with HA, against real processes (a 3-server JetStream cluster, two coordinators with
 * `ha:`, the CLI): jobs live on the leader. A standby answers ListModels with no list at all — it
 * refuses UNAVAILABLE naming the leader's address, as it does every other Admin read — so a caller
 * never mistakes a standby's empty answer for "no jobs". The CLI given both addresses, the
 * standby's first, follows the refusal and prints the leader's LOAD JOBS; given the standby's
 * alone it exits 3 saying where the leader is.
 */
import { spawnSync } from "node:child_process";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, WardenError, leaderAddressOf } from "@warden/common";
import { LoadJobPhase, LoadJobState } from "@warden/proto";
import { simModel, until } from "./support/coordinator-harness.js";
import { startHaCluster, type HaCluster } from "./support/ha-cluster.js";

const root = resolve(import.meta.dirname, "..");
const cliMain = join(root, "services", "cli", "src", "main.ts");

function warden(args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, ["--import", "tsx", cliMain, ...args], { cwd: root, env: { ...process.env, NO_COLOR: "1" }, encoding: "utf8", timeout: 120_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

let cluster: HaCluster | undefined;

beforeAll(async () => {
  // No agent: a load waits for a node (loadWait, 150 s in this cluster) — a job on the leader.
  cluster = await startHaCluster({ name: "ha-load-jobs", models: [simModel("m")] });
}, 180_000);

afterAll(async () => {
  await cluster?.close();
}, 60_000);

describe("load jobs with HA: listed by the leader; a standby names the leader (real processes)", { timeout: 240_000 }, () => {
  it("the leader lists the waiting job; the standby refuses ListModels naming the leader; the CLI with both addresses prints the leader's job, with the standby's alone exits 3 naming the leader", async () => {
    const c = cluster!;
    const { coord: leader } = await c.leader(120_000);
    const standby = c.coords.find((x) => x !== leader)!;
    const call = new AbortController();
    const load = leader.admin.loadModel({ model: "m" }, { signal: call.signal }).catch(() => undefined);
    try {
      const job = await until("m waiting on the leader", async () => {
        const j = (await leader.admin.listModels({})).replicas.find((r) => r.model === "m")?.loadJob;
        // A load sent while the leader's recovery window is still open waits for it first (phase
        // WAITING_FOR_RECOVERY), then for a node: wait for the second.
        return j?.state === LoadJobState.WAITING && j.phase === LoadJobPhase.WAITING_FOR_NODE ? j : undefined;
      }, 60_000);
      expect(job).toMatchObject({ phase: LoadJobPhase.WAITING_FOR_NODE });

      const refused = await standby.admin.listModels({}, { timeoutMs: 10_000 }).then(
        () => undefined,
        (err: unknown) => WardenError.from(err),
      );
      expect(refused?.code, refused?.message).toBe(Code.Unavailable);
      expect(refused?.rawMessage).toContain(`not the leader (this coordinator is a standby): the leader is at ${leader.address}`);
      expect(leaderAddressOf(refused)).toBe(leader.address);
      // The backend bundle commands too: a standby sends nothing to any agent.
      for (const p of [standby.admin.listBackendBundles({}, { timeoutMs: 10_000 }), standby.admin.installBackendBundle({ backend: "backend-sim", allNodes: true }, { timeoutMs: 10_000 }), standby.admin.removeBackendBundle({ backend: "backend-sim", allNodes: true }, { timeoutMs: 10_000 })]) {
        const e = await p.then(() => undefined, (err: unknown) => WardenError.from(err));
        expect([e?.code, leaderAddressOf(e)]).toEqual([Code.Unavailable, leader.address]);
      }

      const both = warden(["models", "ls", "--addr", `${standby.address},${leader.address}`]);
      expect(both.code, both.stderr).toBe(0);
      expect(both.stdout).toMatch(/^LOAD JOBS$/m);
      expect(both.stdout).toMatch(/^m: waiting for a node: /m);

      const alone = warden(["models", "ls", "--addr", standby.address]);
      expect(alone.code, alone.stderr).toBe(3);
      expect(alone.stderr).toContain(`the leader is at ${leader.address}`);
    } finally {
      call.abort();
      await load;
    }
  });
});
