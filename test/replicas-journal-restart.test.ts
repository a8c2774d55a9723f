/**
 * A restarted coordinator counts the instances its journal last saw alive on
 * a node that has not registered again (the last restart gap), over a
 * real coordinator (started twice on one state dir, its embedded agent) and
 * real loopback gRPC; node "b" is driven through NodeService by the test.
 * Before, the second coordinator knew nothing of b's instance: a LoadModel of
 * the max-1 model started a second copy on the embedded node, and b came back
 * with one more.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { Code, createUlidFactory, cryptoRng, systemClock } from "@warden/common";
import { createClient } from "@warden/grpc";
import { BackendState, InstanceState, NodeService } from "@warden/proto";
import { simModel, startTestCoordinator, type TestCoordinator } from "./support/coordinator-harness.js";
import { refusal } from "./support/refusal.js";

const dirs: string[] = [];
const running: TestCoordinator[] = [];
afterAll(async () => {
  for (const t of running) await t.close().catch(() => undefined);
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

const bootEpoch = 1_760_000_000_000n;
// Nothing listens on port 1: the coordinator's WatchBackends to b just fails and retries.
const bAddress = "127.0.0.1:1";

describe("replicas a restarted coordinator knows only from its journal", () => {
  it("count until their node reports: a max-1 model whose instance is on an unregistered node is UNAVAILABLE naming it, no second copy; b's report adopts it", async () => {
    const stateDir = await mkdtemp(join(tmpdir(), "warden-journal-replicas-"));
    dirs.push(stateDir);
    const start = async (): Promise<TestCoordinator> => {
      const t = await startTestCoordinator({ models: [simModel("m")], extra: { stateDir } });
      running.push(t);
      return t;
    };
    const incarnation = createUlidFactory(systemClock, cryptoRng)();
    const report = {
      nodeId: "b",
      bootEpoch,
      sequence: 1n,
      orphans: [],
      backends: [{ incarnation, model: "m", address: "127.0.0.1:2", pid: 4242, state: BackendState.READY, backend: "backend-sim" }],
    };

    // First coordinator: b reports m running; it is adopted (and journaled).
    const first = await start();
    const nc1 = createClient(NodeService, first.c.address);
    await nc1.register({ nodeId: "b", address: bAddress, bootEpoch });
    await nc1.heartbeat(report);
    await first.waitForEvent("instance.adopted", (e) => e.incarnation === incarnation);
    nc1.close();
    await first.close();

    // Second coordinator on the same journal; b has not come back.
    const second = await start();
    // Its recovered event was delivered before the harness watched; the loader's table says the same.
    expect(second.c.loader.journalReplicas.list()).toEqual([{ incarnation, nodeId: "b", model: "m", address: "127.0.0.1:2" }]);
    expect(second.c.nodes.get("b")).toBeUndefined();
    const r = await refusal(second.admin.loadModel({ model: "m" }));
    expect(r.code).toBe(Code.Unavailable);
    expect(r.message).toMatch(/node "b"/);
    expect((await second.admin.listModels({})).instances.filter((i) => i.model === "m")).toEqual([]);
    expect(second.events.filter((e) => e.payload.case === "backendLoaded" && e.model === "m")).toEqual([]);

    // b comes back with the instance: adopted in the same turn; it is the one replica.
    const nc2 = createClient(NodeService, second.c.address);
    await nc2.register({ nodeId: "b", address: bAddress, bootEpoch });
    await nc2.heartbeat(report);
    nc2.close();
    const loaded = await second.admin.loadModel({ model: "m" });
    expect(loaded.instance).toMatchObject({ nodeId: "b", incarnation, state: InstanceState.READY });
    expect((await second.admin.listModels({})).instances.filter((i) => i.model === "m").map((i) => [i.nodeId, i.incarnation])).toEqual([["b", incarnation]]);
    expect(second.c.loader.journalReplicas.count("m")).toBe(0);
  });
});
