/**
 * A rollout across a coordinator restart, over real processes: a coordinator
 * process (SIGHUP for the changed file, then SIGKILL mid-rollout and started
 * again on the same state dir and address with the changed file), two agent
 * processes and their backend-sim processes. Every start carries the load
 * settings' digest; the agents keep it and report it in their inventories, so
 * the new coordinator tells the replica still running the old settings from
 * the one already replaced, and finishes the rollout instead of leaving the
 * old one running for good.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, NodeState } from "@warden/proto";
import { liveTaggedSims, uniqueTag } from "./support/agent-harness.js";
import { liveRemoteAgents, startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { runningBackends } from "./support/chaos-checks.js";
import { until } from "./support/coordinator-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { freePort } from "./support/free-port.js";
import { readyOf, replicaModel } from "./support/replica-calls.js";

const tag = uniqueTag("replicas-rollout-restart");
let coordinators: CoordinatorProcess[] = [];
let agents: RemoteAgent[] = [];
let closers: (() => void)[] = [];
let dirs: string[] = [];

afterEach(async () => {
  for (const c of closers) c();
  closers = [];
  for (const a of agents) await a.cleanup();
  agents = [];
  for (const c of coordinators) await c.kill();
  coordinators = [];
  for (const d of dirs) await rm(d, { recursive: true, force: true });
  dirs = [];
  expect(await liveRemoteAgents()).toEqual([]);
});

afterAll(async () => {
  expect(await liveTaggedSims(tag)).toEqual([]);
});

/** m: two replicas (min = max = 2), any node; `rev` marks its load settings (an option). */
const model = (rev: number): Record<string, unknown> => {
  const m = replicaModel("m", { min: 2, max: 2, targetInFlight: 1 }, { spread: "any" });
  return { ...m, options: [...(m.options as string[]), `rev:${String(rev)}`] };
};

describe("a rollout across a coordinator restart", { timeout: 300_000 }, () => {
  it("kill -9 mid-rollout, started again with the changed file: the replica still on the old settings is found stale from its node's inventory and replaced; none of the old ones is left", async () => {
    const dir = await mkdtemp(join(tmpdir(), "warden-rollout-restart-"));
    dirs.push(dir);
    const address = `127.0.0.1:${String(await freePort())}`;
    const config = (rev: number): Record<string, unknown> => ({
      listen: address,
      stateDir: join(dir, "state"),
      embeddedAgent: false,
      policy: { tickInterval: "100ms", enforcementRetries: 60, enforcementRetryInterval: "250ms" },
      stop: { timeout: "10s", rpcTimeout: "2s" },
      nodeLostAfter: "10m",
      models: [model(rev)],
    });
    const path = join(dir, "coordinator.yaml");
    const first = await startCoordinatorProcess(path, config(1));
    coordinators.push(first);
    let admin: Client<typeof AdminService> = createClient(AdminService, first.address);
    closers.push(() => {
      admin.close();
    });
    for (const nodeId of ["a", "b"]) agents.push(await startRemoteAgent({ coordinator: address, nodeId, tag, config: { maxReplicasPerModel: 2 } }));
    await until("a and b ready", async () => (await admin.listNodes({})).nodes.filter((n) => n.state === NodeState.READY).length === 2, 60_000);
    const old = await until("two ready replicas", async () => {
      const x = await readyOf(admin, "m");
      return x.length === 2 ? x.map((i) => i.incarnation) : undefined;
    }, 90_000);

    // The file changes (rev 2) and the coordinator reloads it: once one old replica is replaced, kill -9.
    await writeFile(path, JSON.stringify(config(2), null, 2));
    first.child.kill("SIGHUP");
    await first.waitForEvent("rollout.started", () => true, 60_000);
    const firstSwap = await first.waitForEvent("eviction.stopped", (e) => old.includes(e.incarnation ?? ""), 90_000);
    await first.kill();
    const stillOld = old.filter((i) => i !== firstSwap.incarnation);

    const second = await startCoordinatorProcess(path, config(2));
    coordinators.push(second);
    admin.close();
    admin = createClient(AdminService, second.address);
    // The old replica left is adopted from its node's inventory, found stale, and replaced like any rollout.
    await second.waitForEvent("instance.adopted", (e) => stillOld.includes(e.incarnation ?? ""), 90_000);
    await second.waitForEvent("rollout.started", () => true, 90_000);
    const stopped = await second.waitForEvent("eviction.stopped", (e) => stillOld.includes(e.incarnation ?? ""), 120_000);
    expect(stopped["evictionStopped"]).toMatchObject({ reason: "EVICTION_REASON_ROLLOUT" });
    await second.waitForEvent("rollout.finished", () => true, 60_000);
    const now = await until("two ready replicas, none of the old ones", async () => {
      const x = await readyOf(admin, "m");
      return x.length === 2 && !x.some((i) => old.includes(i.incarnation)) ? x.map((i) => i.incarnation) : undefined;
    }, 90_000);
    await until("only the new replicas' backends run", async () => {
      const running = (await runningBackends(tag)).map((b) => b.incarnation).sort();
      return running.length === 2 && running.every((i) => now.includes(i));
    }, 60_000);
  });
});
