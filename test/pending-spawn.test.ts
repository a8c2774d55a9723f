/**
 * The spawn window, through a real agent's start flow and a real
 * backend-sim process: between the start's last leader-fence check and the
 * table's entry for its process the agent awaits the spawn. An inventory
 * taken in that window (a new leader's Register) must list the start, with
 * its model, so that leader counts it for the node's exclusive groups
 * instead of starting the group's other member beside it. The inventory is
 * taken in the very turn after the fence check passes, no timing involved.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { BackendState } from "@warden/proto";
import { LeaderFence } from "../services/agent/src/leader-fence-store.js";
import type { InventorySnapshot } from "../services/agent/src/inventory.js";
import { newIncarnation, randomPortRange, startAgentHarness, startReady, uniqueTag, type AgentHarness } from "./support/agent-harness.js";

let h: AgentHarness;

beforeAll(async () => {
  h = await startAgentHarness({ tag: uniqueTag("pending-spawn"), ports: randomPortRange(4) });
}, 60_000);

afterAll(async () => {
  await h.close({ stopBackends: true });
});

describe("the spawn window", () => {
  it("an inventory taken right after a start's fence check lists the start as spawning, with its model", async () => {
    const inc = newIncarnation();
    const taken: Promise<InventorySnapshot>[] = [];
    // The real check, called from the spy with the fence it was called on.
    // eslint-disable-next-line @typescript-eslint/unbound-method
    const check = LeaderFence.prototype.check;
    const spy = vi.spyOn(LeaderFence.prototype, "check").mockImplementation(function (this: LeaderFence, epoch: bigint) {
      check.call(this, epoch);
      // The same turn's continuation runs first (up to the start's first await: the spawn);
      // this inventory is taken right after, before the process can be in the table.
      queueMicrotask(() => taken.push(h.agent.inventory()));
    });
    try {
      await startReady(h.client, "window-m", [], inc);
    } finally {
      spy.mockRestore();
    }
    const snapshots = await Promise.all(taken);
    const seen = snapshots.map((s) => s.backends.find((b) => b.incarnation === inc));
    // The snapshot taken in the window: listed, spawning, no pid yet, with its model and address.
    const inWindow = seen.find((b) => b !== undefined && b.pid === 0);
    expect(inWindow).toMatchObject({ model: "window-m", state: BackendState.SPAWNING, backend: "sim" });
    expect(inWindow?.address).toMatch(/^127\.0\.0\.1:\d+$/);
    // And once the process is in the table, it is listed by its own entry only (never twice).
    const after = (await h.agent.inventory()).backends.filter((b) => b.incarnation === inc);
    expect(after).toHaveLength(1);
    expect(after[0]?.pid).toBeGreaterThan(0);
  }, 60_000);
});
