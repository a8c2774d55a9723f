/**
 * A config change rolls out over real processes: a coordinator process and
 * two agent processes running real backend-sim processes. A model runs two
 * replicas; its options change in the config file and the coordinator gets
 * SIGHUP. The replicas are replaced one at a time: the process table shows
 * two new backend processes (answering as the new options say), the ready count
 * never drops below two while it happens (sampled on every poll), and the
 * events say rollout (replica.scaled-up cause "rollout", the old replicas
 * stopped with reason ROLLOUT, each after its replacement was loaded).
 */
import { readFile, writeFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { EvictionReason, InstanceState } from "@warden/proto";
import { runningBackends } from "./support/chaos-checks.js";
import { chaosLifecycle } from "./support/chaos-lifecycle.js";
import type { LoggedEvent } from "./support/coordinator-process.js";
import { simModel, until } from "./support/coordinator-harness.js";

const chaos = chaosLifecycle();

/** The config file a coordinator process was started with (its `--config` argument). */
async function configOf(pid: number): Promise<string> {
  const argv = (await readFile(`/proc/${String(pid)}/cmdline`, "utf8")).split("\0");
  const path = argv[argv.indexOf("--config") + 1];
  if (path === undefined || path === "") throw new Error(`no --config in ${argv.join(" ")}`);
  return path;
}


describe("a config change rolls out (real processes, SIGHUP)", { timeout: 300_000 }, () => {
  it("two replicas are replaced one at a time, the new one ready before the old one stops, audited as a rollout", async () => {
    const model = { ...simModel("m", { knobs: { predict_tokens: 1 } }), replicas: { min: 2, max: 2 } };
    const c = await chaos.start({ name: "rollout", models: [model] });
    await c.addAgent("a", { maxReplicasPerModel: 2 });
    await c.addAgent("b", { maxReplicasPerModel: 2 });
    const readyNow = async (): Promise<string[]> =>
      (await c.admin.listModels({})).instances.filter((i) => i.model === "m" && i.state === InstanceState.READY).map((i) => i.incarnation).sort();
    const old = await until("two ready replicas", async () => {
      const r = await readyNow();
      return r.length === 2 ? r : undefined;
    }, 90_000);
    const oldPids = (await runningBackends(c.tag)).map((b) => b.pid).sort();
    expect(oldPids).toHaveLength(2);

    // The file changes m's options (a load setting); SIGHUP applies it.
    const path = await configOf(c.coord.pid);
    const config = JSON.parse(await readFile(path, "utf8")) as { models: Record<string, unknown>[] };
    const newOptions = ["sim.predict_tokens:2"];
    await writeFile(path, JSON.stringify({ ...config, models: config.models.map((x) => (x["id"] === "m" ? { ...x, options: newOptions } : x)) }));
    process.kill(c.coord.pid, "SIGHUP");

    let fewest = 2;
    const fresh = await until("two ready replicas, none of the old", async () => {
      const r = await readyNow();
      fewest = Math.min(fewest, r.length);
      return r.length === 2 && !r.some((i) => old.includes(i)) ? r : undefined;
    }, 180_000);
    expect(fewest).toBe(2);

    // The process table: the old backends are gone, two new ones run.
    const now = await until("the old backends gone", async () => {
      const b = await runningBackends(c.tag);
      return b.length === 2 && !b.some((x) => oldPids.includes(x.pid)) ? b : undefined;
    }, 60_000);
    expect(now.map((b) => b.incarnation).sort()).toEqual(fresh);
    // The new replicas loaded the new options: the sim answers predict_tokens words (was 1, now 2).
    for (let i = 0; i < 4; i++) {
      const r = await c.inference.predict({ model: "m", options: { Prompt: "hi" } }, { timeoutMs: 60_000 });
      expect(new TextDecoder().decode(r.reply?.message)).toBe("m: w0 w1");
    }

    // The events: two replacements caused by the rollout, the two old replicas stopped with reason ROLLOUT
    // (the stop's last event may be logged after its process is gone: waited for), each stop started after a
    // replacement had loaded.
    const rolloutReason = (e: LoggedEvent): boolean => JSON.stringify(e).includes(`"${EvictionReason[EvictionReason.ROLLOUT]}"`) || JSON.stringify(e).includes("EVICTION_REASON_ROLLOUT");
    const stops = await until("both rollout stops logged", () => {
      const x = c.logged().filter((e) => e.type === "eviction.stopped" && rolloutReason(e));
      return x.length >= 2 ? x : undefined;
    }, 60_000);
    expect(stops.map((e) => e.incarnation).sort()).toEqual(old);
    const logged = c.logged();
    const ups = logged.filter((e) => e.type === "replica.scaled-up" && JSON.stringify(e).includes('"rollout"'));
    expect(ups.map((e) => e.incarnation).sort()).toEqual(fresh);
    const order = logged
      .filter((e) => (e.type === "backend.loaded" && fresh.includes(e.incarnation ?? "")) || (e.type === "eviction.started" && rolloutReason(e)))
      .map((e) => e.type);
    expect(order).toEqual(["backend.loaded", "eviction.started", "backend.loaded", "eviction.started"]);
  });
});
