/**
 * The coordinator publishing its evictions to a real nats-server, read back
 * by `warden events --nats` as a separate process; and a config reload that
 * removes a model (unloaded gracefully with reason `config`).
 */
import { spawn } from "node:child_process";
import { resolve, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EvictionReason } from "@warden/proto";
import { resolveCoordinatorConfig } from "@warden/coordinator";
import { simModel, startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { startNatsServer, type NatsServerHandle } from "./support/nats-server.js";

const root = resolve(import.meta.dirname, "..");
let nats: NatsServerHandle;

beforeAll(async () => {
  nats = await startNatsServer();
});
afterAll(async () => {
  await nats.dispose();
});

describe("coordinator audit on NATS and config reload", () => {
  it("an eviction is published to JetStream and `warden events --nats --json` sees started then stopped, once each, with sequences", async () => {
    let t: TestCoordinator | undefined;
    try {
      t = await startTestCoordinator({ models: [simModel("a", { groups: ["g"] }), simModel("b", { groups: ["g"] })], extra: { nats: { url: nats.url } } });
      await t.admin.loadModel({ model: "a" });
      await t.admin.loadModel({ model: "b" }); // evicts a (group)
      await t.waitForEvent("eviction.stopped", (e) => e.model === "a");
      await until("outbox drained to JetStream", () => t!.c.outbox.stats().depth === 0 || undefined);
      const cli = spawn(process.execPath, ["--import", "tsx", join(root, "services/cli/src/main.ts"), "events", "--nats", nats.url, "--durable", "test-reader", "--json", "--model", "a"], { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
      let out = "";
      cli.stdout.on("data", (b: Buffer) => (out += b.toString()));
      try {
        const lines = await until("started and stopped read back", () => {
          const ls = out
            .trim()
            .split("\n")
            .filter((l) => l !== "")
            .map((l) => JSON.parse(l) as { type: string; id: string; model: string; sequence: { n: string }; evictionStopped?: { reason: string } });
          return ls.some((l) => l.type === "eviction.stopped") ? ls : undefined;
        });
        const types = lines.map((l) => l.type);
        expect(types.filter((x) => x === "eviction.started")).toHaveLength(1);
        expect(types.filter((x) => x === "eviction.stopped")).toHaveLength(1);
        expect(types.indexOf("eviction.started")).toBeLessThan(types.indexOf("eviction.stopped"));
        expect(lines.every((l) => l.model === "a")).toBe(true);
        expect(new Set(lines.map((l) => l.id)).size).toBe(lines.length);
        const started = lines.find((l) => l.type === "eviction.started");
        const stopped = lines.find((l) => l.type === "eviction.stopped");
        expect(Number(stopped?.sequence.n)).toBe(Number(started?.sequence.n) + 1);
        expect(stopped?.evictionStopped?.reason).toBe("EVICTION_REASON_GROUP");
      } finally {
        cli.kill("SIGINT");
        await new Promise((r) => cli.once("exit", r));
      }
    } finally {
      await t?.close();
    }
  });

  it("a config reload that removes a model unloads it gracefully with reason config; the others keep their accounting", async () => {
    const t = await startTestCoordinator({ models: [simModel("keep"), simModel("drop")] });
    try {
      const keep = await t.admin.loadModel({ model: "keep" });
      await t.admin.loadModel({ model: "drop" });
      await t.c.reload(resolveCoordinatorConfig({ ...{ listen: "127.0.0.1:0", stateDir: t.dir }, models: [simModel("keep")], policy: { limitPerNode: 5 } }));
      const stopped = await t.waitForEvent("eviction.stopped", (e) => e.model === "drop");
      expect(stopped.payload.case === "evictionStopped" && stopped.payload.value.reason).toBe(EvictionReason.CONFIG);
      const listed = (await t.admin.listModels({})).instances.map((i) => [i.model, i.incarnation]);
      expect(listed).toEqual([["keep", keep.instance?.incarnation]]);
      expect((await t.admin.getPolicy({})).policy?.limitPerNode).toBe(5);
      expect((await t.admin.listModels({})).configured.map((m) => m.model)).toEqual(["keep"]);
    } finally {
      await t.close();
    }
  });
});
