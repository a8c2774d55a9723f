import { describe, expect, it } from "vitest";
import type { StopAnswer } from "./ports.js";
import { createHarness, deferred } from "./test-fakes.js";

describe("acquireNow (routing in the same turn)", () => {
  it("gives nothing and starts nothing while no replica is ready: the call takes acquire, which loads", async () => {
    const h = createHarness();
    expect(h.loader.acquireNow("m1", h.never)).toBeUndefined();
    await h.flush();
    expect(h.n1.starts).toHaveLength(0);
    expect(h.loader.acquireNow("no-such-model", h.never)).toBeUndefined();
  });

  it("on a ready replica gives the lease acquire gives: tracked in flight until complete(), which is idempotent", async () => {
    const h = createHarness();
    const a = await h.loader.acquire("m1", h.never);
    const b = h.loader.acquireNow("m1", h.never);
    expect(b).toBeDefined();
    if (b === undefined) return;
    expect(b.incarnation).toBe(a.incarnation);
    expect(b.backend).toBe(a.backend);
    expect(h.loader.core.inFlight(b.address)).toBe(2);
    b.complete();
    b.complete();
    expect(h.loader.core.inFlight(b.address)).toBe(1);
    a.complete();
    expect(h.loader.core.inFlight(a.address)).toBe(0);
  });

  it("gives nothing for an aborted call or a replica pending eviction (acquire decides: refuses, or waits for the settle)", async () => {
    const h = createHarness();
    const m1 = await h.loader.ensureLoaded("m1", h.never);
    const aborted = new AbortController();
    aborted.abort();
    expect(h.loader.acquireNow("m1", aborted.signal)).toBeUndefined();
    const gate = deferred<StopAnswer>();
    h.n1.stopScript = () => gate.promise;
    const unload = h.track(h.loader.unload("m1", { force: true }));
    await h.flush();
    expect(h.loader.core.instance(m1.incarnation)?.pendingEviction).toBeDefined();
    expect(h.loader.acquireNow("m1", h.never)).toBeUndefined();
    gate.resolve({ t: "stopped" });
    await h.flush();
    expect(unload.value().t).toBe("stopped");
  });
});
