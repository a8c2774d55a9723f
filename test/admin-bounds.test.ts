/**
 * Numbers in range and small LocalAI parities, over real gRPC to a real
 * coordinator (embedded agent, backend-sim processes; one remote agent
 * process for the unreachable node):
 * - UpdatePolicy with a uint64 past its documented maximum (2^64-1) is
 *   INVALID_ARGUMENT naming the field and changes nothing, so GetPolicy still
 *   answers (it used to be applied, answer INTERNAL, and break GetPolicy);
 *   a patch is validated whole (a bad second model leaves the first as it was);
 * - UnloadModel stop_timeout_ms = 2^31 is refused, not a timer that fires at once;
 * - WatchEvents filters are validated like other identifiers;
 * - LoadModel of a loaded model refreshes its last-used (LocalAI UpdateLastUsed);
 * - ListModels and `warden models ls` show an instance on an unreachable
 *   (SIGSTOPped) agent's node as such, not plainly ready.
 */
import { spawn } from "node:child_process";
import { join, resolve } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { Code, isWardenError, type WardenError } from "@warden/common";
import { InstanceState, NodeState } from "@warden/proto";
import { liveTaggedSims, simCatalog, uniqueTag } from "./support/agent-harness.js";
import { liveRemoteAgents, lowPortRange, startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { simModel, startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";

const fileTag = uniqueTag("admin-bounds");
const root = resolve(import.meta.dirname, "..");
const cliMain = join(root, "services", "cli", "src", "main.ts");

let t: TestCoordinator | undefined;
const agents: RemoteAgent[] = [];

afterEach(async () => {
  for (const a of agents.splice(0)) await a.cleanup();
  await t?.close();
  t = undefined;
});

afterAll(async () => {
  expect(await liveTaggedSims(fileTag)).toEqual([]);
  expect(await liveRemoteAgents()).toEqual([]);
});

async function failure(p: Promise<unknown>): Promise<WardenError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  if (!isWardenError(e)) throw new Error(`expected a WardenError, got ${String(e)}`);
  return e;
}

/** Opens WatchEvents with `req` and returns how it ended: the error, or "open" once an event arrives. */
async function watchOutcome(tc: TestCoordinator, req: { types?: string[]; nodeId?: string; model?: string }): Promise<WardenError | "open"> {
  const ctl = new AbortController();
  // The deadline only ends a stream that (wrongly) opened; a refusal comes at once.
  const stream = tc.admin.watchEvents({ types: req.types ?? [], nodeId: req.nodeId ?? "", model: req.model ?? "" }, { signal: ctl.signal, timeoutMs: 30_000 });
  try {
    for await (const _ of stream) return "open";
    return "open";
  } catch (err) {
    if (isWardenError(err)) return err;
    throw err;
  } finally {
    ctl.abort();
  }
}

/**
 * Runs the CLI as its own process. Not spawnSync: the coordinator it talks to
 * lives in this test process and must keep answering meanwhile.
 */
function warden(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolvePromise, reject) => {
    const p = spawn(process.execPath, ["--import", "tsx", cliMain, ...args], { cwd: root, env: { ...process.env, NO_COLOR: "1" }, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    p.stdout.on("data", (b: Buffer) => (stdout += b.toString()));
    p.stderr.on("data", (b: Buffer) => (stderr += b.toString()));
    p.on("error", reject);
    p.on("close", (code) => {
      resolvePromise({ code, stdout, stderr });
    });
  });
}

const embeddedAgent = (tag: string): Record<string, unknown> => ({ catalog: { "backend-sim": simCatalog(tag) } });

describe("numbers in range over the Admin API", { timeout: 180_000 }, () => {
  it("UpdatePolicy idle_timeout_ms = 2^64-1 is INVALID_ARGUMENT naming idle_timeout_ms; nothing changes and GetPolicy still works", async () => {
    t = await startTestCoordinator({ models: [simModel("m1"), simModel("m2")], agent: embeddedAgent(`${fileTag}-policy`) });
    const before = await t.admin.getPolicy({});
    const max = 2n ** 64n - 1n;
    const e1 = await failure(t.admin.updatePolicy({ patch: { idleTimeoutMs: max, limitPerNode: 3 } }));
    expect(e1.code).toBe(Code.InvalidArgument);
    expect(e1.rawMessage).toMatch(/^patch\.idle_timeout_ms: /);
    expect(await t.admin.getPolicy({})).toEqual(before);
    // every bounded field, each alone; a value just past the documented maximum
    const day = 86_400_000n;
    for (const [patch, field] of [
      [{ busyTimeoutMs: max }, "busy_timeout_ms"],
      [{ idleTimeoutMs: 30n * day + 1n }, "idle_timeout_ms"],
      [{ idleTimeoutMs: 0n }, "idle_timeout_ms"],
      [{ limitPerNode: 1025 }, "limit_per_node"],
      [{ memoryThreshold: 0 }, "memory_threshold"],
    ] as const) {
      const e = await failure(t.admin.updatePolicy({ patch }));
      expect(e.code, field).toBe(Code.InvalidArgument);
      expect(e.rawMessage, field).toContain(field);
    }
    // validated whole: a valid pin for m1 and a bad group for m2 leave m1 unpinned
    const e2 = await failure(t.admin.updatePolicy({ patch: { limitPerNode: 2, models: [{ model: "m1", pinned: true, groups: [] }, { model: "m2", pinned: false, groups: [""] }] } }));
    expect(e2.code).toBe(Code.InvalidArgument);
    expect(e2.rawMessage).toMatch(/^patch\.models\[1\]\.groups\[0\]: /);
    const e3 = await failure(t.admin.updatePolicy({ patch: { models: [{ model: "m1", pinned: true, groups: Array.from({ length: 65 }, (_, i) => `g${String(i)}`) }] } }));
    expect(e3.rawMessage).toMatch(/^patch\.models\[0\]\.groups: at most 64/);
    expect(await t.admin.getPolicy({})).toEqual(before);
    // the maxima themselves are accepted and read back exactly
    const ok = await t.admin.updatePolicy({ patch: { idleTimeoutMs: 30n * day, limitPerNode: 1024 } });
    expect(ok.policy).toMatchObject({ idleTimeoutMs: 30n * day, limitPerNode: 1024 });
    expect((await t.admin.getPolicy({})).policy).toMatchObject({ idleTimeoutMs: 30n * day, limitPerNode: 1024 });
  });

  it("UnloadModel stop_timeout_ms = 2^31 is INVALID_ARGUMENT naming stop_timeout_ms, not a stop whose deadline fires at once; the model stays loaded", async () => {
    t = await startTestCoordinator({ models: [simModel("m1")], agent: embeddedAgent(`${fileTag}-unload`) });
    const loaded = await t.admin.loadModel({ model: "m1" }, { timeoutMs: 60_000 });
    for (const ms of [2n ** 31n, 86_400_001n, 2n ** 64n - 1n]) {
      const e = await failure(t.admin.unloadModel({ model: "m1", stopTimeoutMs: ms }));
      expect(e.code, String(ms)).toBe(Code.InvalidArgument);
      expect(e.rawMessage, String(ms)).toMatch(/^stop_timeout_ms: /);
    }
    const rows = (await t.admin.listModels({})).instances;
    expect(rows.map((r) => [r.incarnation, r.state])).toEqual([[loaded.instance?.incarnation, InstanceState.READY]]);
    expect(t.events.some((e) => e.payload.case === "evictionStarted")).toBe(false);
  });

  it("WatchEvents refuses bad filters: node and model ids by the id pattern, types by name, the type list capped", async () => {
    t = await startTestCoordinator({ models: [simModel("m1")], agent: embeddedAgent(`${fileTag}-watch`) });
    const cases: [Parameters<typeof watchOutcome>[1], RegExp][] = [
      [{ nodeId: "bad node!" }, /^node_id: /],
      [{ nodeId: "n".repeat(129) }, /^node_id: /],
      [{ model: "../m1" }, /^model: /],
      [{ model: "m".repeat(10_000) }, /^model: /],
      [{ types: ["backend.loaded", "nope"] }, /^types\[1\]: unknown event type/],
      [{ types: ["x".repeat(100_000)] }, /^types\[0\]: unknown event type \(100000 characters\)$/],
      [{ types: Array.from({ length: 65 }, () => "backend.loaded") }, /^types: at most 64 event types/],
    ];
    for (const [req, re] of cases) {
      const r = await watchOutcome(t, req);
      expect(r === "open" ? "open" : r.code, JSON.stringify(req).slice(0, 80)).toBe(Code.InvalidArgument);
      expect(r === "open" ? "open" : r.rawMessage).toMatch(re);
    }
    // a valid filter opens and delivers
    const tc = t;
    const open = watchOutcome(tc, { types: ["backend.loaded"], model: "m1", nodeId: "local" });
    await tc.admin.loadModel({ model: "m1" }, { timeoutMs: 60_000 });
    expect(await open).toBe("open");
  });

  it("LoadModel of a loaded model refreshes its last-used (LocalAI UpdateLastUsed on a cache hit)", async () => {
    t = await startTestCoordinator({ models: [simModel("m1")], agent: embeddedAgent(`${fileTag}-lastused`) });
    const first = await t.admin.loadModel({ model: "m1" }, { timeoutMs: 60_000 });
    const firstMs = timestampMs(first.instance?.lastUsed ?? { seconds: 0n, nanos: 0 } as never);
    expect(firstMs).toBeGreaterThan(0);
    // Each answer turns the monotonic last-used into wall time with the clocks read
    // at answer time; a process preempted between those two reads (a loaded machine)
    // shifts the result by that long. So: move the clock on by far more than such a
    // shift, and compare with a tolerance well inside that.
    const jitterMs = 150;
    await until("the clock moved well past the first last-used", () => Date.now() > firstMs + 4 * jitterMs);
    const beforeSecond = Date.now();
    const second = await t.admin.loadModel({ model: "m1" }, { timeoutMs: 60_000 });
    expect(second.instance?.incarnation).toBe(first.instance?.incarnation);
    const secondMs = timestampMs(second.instance?.lastUsed ?? { seconds: 0n, nanos: 0 } as never);
    expect(secondMs).toBeGreaterThan(firstMs + 2 * jitterMs);
    expect(secondMs).toBeGreaterThanOrEqual(beforeSecond - jitterMs);
    const listed = (await t.admin.listModels({})).instances.find((i) => i.incarnation === first.instance?.incarnation);
    expect(Math.abs(timestampMs(listed?.lastUsed ?? { seconds: 0n, nanos: 0 } as never) - secondMs)).toBeLessThanOrEqual(jitterMs);
  });

  it("an instance on an unreachable node (SIGSTOPped agent) is shown with its node's state by ListModels and `warden models ls`", async () => {
    t = await startTestCoordinator({
      embeddedAgent: false,
      models: [simModel("far")],
      agent: { ports: { ...lowPortRange(16), quarantine: "1s" }, catalog: { "backend-sim": simCatalog(`${fileTag}-embedded`) } },
      extra: { nodeGrace: "2s" },
    });
    const tc = t;
    const a = await startRemoteAgent({ coordinator: tc.c.address, nodeId: "remote-a", tag: fileTag });
    agents.push(a);
    await until("remote-a registered with an inventory", () => {
      const n = tc.c.nodes.get("remote-a");
      return n !== undefined && n.state === "ready" && n.inventory !== undefined;
    });
    const loaded = await tc.admin.loadModel({ model: "far" }, { timeoutMs: 60_000 });
    expect(loaded.instance?.nodeId).toBe("remote-a");
    const row = async () => (await tc.admin.listModels({})).instances.find((i) => i.incarnation === loaded.instance?.incarnation);
    await until("far listed on a ready node", async () => (await row())?.nodeState === NodeState.READY);

    a.pause();
    await until("remote-a unreachable", async () => (await tc.admin.listNodes({})).nodes.find((n) => n.nodeId === "remote-a")?.state === NodeState.UNREACHABLE);
    const r = await row();
    expect(r?.state).toBe(InstanceState.READY);
    expect(r?.nodeState).toBe(NodeState.UNREACHABLE);
    const cli = await warden(["models", "ls", "--addr", tc.c.address]);
    expect(cli.code, cli.stderr).toBe(0);
    const line = cli.stdout.split("\n").find((l) => l.includes("far"));
    // Its backend still answers the coordinator's own probe: it serves through the agent's outage.
    expect(line).toContain("ready (serving, agent unreachable)");

    a.resume();
    await until("far listed on a ready node again", async () => (await row())?.nodeState === NodeState.READY, 60_000);
  });
});
