import { describe, expect, it } from "vitest";
import { createHarness } from "./test-fakes.js";

// A graceful stop waits for the address's calls, then calls Free() — a call
// with no identity. Once the process has exited, or its port serves another
// incarnation, neither step may run: the in-flight count and Free() would be
// the new process's (found beside seed 18428).
describe("a graceful stop whose process is gone", () => {
  it("skips the busy wait and Free once the agent reported the exit", async () => {
    const h = createHarness();
    const lease = await h.loader.acquire("m1", h.never);
    const stop = h.track(h.loader.unload("m1", { force: false }));
    await h.run(1_000);
    expect(stop.done()).toBe(false); // waiting for the open call
    h.loader.onBackendGone(lease.incarnation, { exitCode: 139, signal: "SIGSEGV", intentional: false, lastStderrLine: "" });
    await h.until(() => stop.done());
    expect(h.frees.callsAt(lease.address)).toBe(0);
    expect(h.n1.stopsOf(lease.incarnation)).toHaveLength(1);
    lease.complete();
  });

  it("never calls Free on a port recycled for another incarnation", async () => {
    const h = createHarness();
    const lease = await h.loader.acquire("m1", h.never);
    const stop = h.track(h.loader.unload("m1", { force: false }));
    await h.run(1_000);
    expect(stop.done()).toBe(false);
    // The exit notification is late; the agent already gave the port to m2.
    h.n1.recycledAddress = lease.address;
    const m2 = await h.loader.ensureLoaded("m2", h.never);
    expect(m2.address).toBe(lease.address);
    await h.until(() => stop.done());
    expect(h.frees.callsAt(lease.address)).toBe(0);
    expect(h.n1.stopsOf(lease.incarnation)).toMatchObject([{ incarnation: lease.incarnation }]);
    expect(h.loader.hasModelAtAddress("m2", m2.address!, m2.incarnation)).toBe(true);
    lease.complete();
  });
});
