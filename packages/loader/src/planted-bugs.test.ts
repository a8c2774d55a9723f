import { Code, WardenError } from "@warden/common";
import { plantBugs, type PlantedBug } from "@warden/common/testing/planted-bugs";
import { afterEach, describe, expect, it } from "vitest";
import { createHarness, deferred } from "./test-fakes.js";

// Each planted bug in the loader (packages/common/src/planted-bugs.ts)
// changes its behaviour at its one branch, and only when planted: the same
// scenario runs with the switch off (the correct answer) and on (the bug).

let undo: (() => void) | undefined;
afterEach(() => {
  undo?.();
  undo = undefined;
});

function plant(bug: PlantedBug | undefined): void {
  undo?.();
  undo = bug === undefined ? undefined : plantBugs([bug]);
}

describe("planted bugs in the loader", () => {
  it("route-to-stopping: a new call is routed to an instance already detached for its stop", async () => {
    const run = async (bug: PlantedBug | undefined): Promise<boolean> => {
      plant(bug);
      const h = createHarness();
      const first = await h.loader.acquire("m1", h.never);
      // The stop is detached and writing eviction.started; it has not taken the lifecycle lock yet.
      const outbox = deferred<undefined>();
      h.events.durableGate = outbox.promise.then(() => undefined);
      const stopping = h.loader.unload("m1", { force: false });
      await h.flush();
      expect(h.loader.core.instance(first.incarnation)?.pendingEviction).toBeDefined();
      const second = h.track(h.loader.acquire("m1", h.never));
      await h.flush();
      const routedToStopping = second.done() && second.value().incarnation === first.incarnation;
      outbox.resolve(undefined);
      first.complete();
      if (routedToStopping) second.value().complete();
      await h.until(() => second.done());
      await stopping;
      return routedToStopping;
    };
    expect(await run(undefined)).toBe(false);
    expect(await run("route-to-stopping")).toBe(true);
  });

  it("report-remote-failure-before-drop: a failed remote stop is registered again instead of becoming a leftover", async () => {
    const run = async (bug: PlantedBug | undefined): Promise<{ outcome: string; held: boolean; leftovers: number }> => {
      plant(bug);
      const h = createHarness();
      h.placement.route.set("m1", "n2");
      const m1 = await h.loader.ensureLoaded("m1", h.never);
      h.n2.stopScript = () => new WardenError(Code.DeadlineExceeded, "stop deadline");
      const r = await h.loader.unload("m1", { force: true });
      return { outcome: r.t, held: h.loader.heldInstance(m1.incarnation) !== undefined, leftovers: h.loader.leftoverList().length };
    };
    expect(await run(undefined)).toEqual({ outcome: "leftover", held: false, leftovers: 1 });
    expect(await run("report-remote-failure-before-drop")).toEqual({ outcome: "registered-again", held: true, leftovers: 0 });
  });

  it("forget-intents-of-unregistered-nodes: an open stop intent of a node with no agent yet is not restored", () => {
    const run = (bug: PlantedBug | undefined): { restored: number; knows: boolean } => {
      plant(bug);
      const h = createHarness();
      const restored = h.loader.restoreStopIntents([{ incarnation: "01J00000000000000000000000", nodeId: "n9", model: "m1", address: "n9:5000" }]);
      return { restored, knows: h.loader.knows("01J00000000000000000000000") };
    };
    expect(run(undefined)).toEqual({ restored: 1, knows: true });
    expect(run("forget-intents-of-unregistered-nodes")).toEqual({ restored: 0, knows: false });
  });

  it("adopt-confirmed-gone: an incarnation our stop confirmed gone is adopted again from a stale inventory", async () => {
    const run = async (bug: PlantedBug | undefined): Promise<boolean> => {
      plant(bug);
      const h = createHarness();
      h.placement.route.set("m1", "n2");
      const m1 = await h.loader.ensureLoaded("m1", h.never);
      await h.loader.unload("m1", { force: true });
      const spec = h.loader.modelSpec("m1")!;
      return h.loader.adoptRemoteOnly(spec, "n2", m1.address!, m1.incarnation);
    };
    expect(await run(undefined)).toBe(false);
    expect(await run("adopt-confirmed-gone")).toBe(true);
  });

  it("count-failed-stops-as-evicted: a load is admitted over the limit after its LRU victim's stop failed", async () => {
    const run = async (bug: PlantedBug | undefined): Promise<{ loaded: boolean; occupied: number }> => {
      plant(bug);
      const h = createHarness({ policy: { limitPerNode: 1 }, enforcement: { maxAttempts: 2, intervalMs: 1_000 } });
      await h.loader.ensureLoaded("m1", h.never);
      const gate = deferred<never>();
      h.n1.stopScript = () => gate.promise;
      h.n1.isRunningAnswer = () => true;
      gate.reject(new WardenError(Code.Unavailable, "agent gone"));
      h.track(h.loader.ensureLoaded("m2", h.never));
      await h.run(5_000);
      const loaded = h.loader.heldInstances().some((x) => x.model === "m2" && x.phase === "ready");
      return { loaded, occupied: h.loader.core.occupancy("n1").total };
    };
    expect(await run(undefined)).toEqual({ loaded: false, occupied: 1 });
    expect(await run("count-failed-stops-as-evicted")).toEqual({ loaded: true, occupied: 2 });
  });
});
