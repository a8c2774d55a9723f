import { Code, ManualClock, WardenError, isWardenError } from "@warden/common";
import { describe, expect, it } from "vitest";
import { createWatchdogCore } from "./watchdog-core.js";
import { createFixture } from "./watchdog-fixture.js";
import { checkSnapshotInvariants } from "./watchdog-snapshot.js";
import { errorOf, expectInvalid } from "./expect-invalid.js";

describe("policy changes apply live and are validated", () => {
  it("rejects invalid values with INVALID_ARGUMENT naming the field, and applies nothing", () => {
    const f = createFixture();
    expectInvalid(() => f.core.updatePolicy({ limitPerNode: -1 }), "limitPerNode");
    expectInvalid(() => f.core.updatePolicy({ limitPerNode: Number.NaN }), "limitPerNode");
    expectInvalid(() => f.core.updatePolicy({ idleTimeoutMs: -5 }), "idleTimeoutMs");
    expectInvalid(() => f.core.updatePolicy({ busyTimeoutMs: Number.NaN }), "busyTimeoutMs");
    expectInvalid(() => f.core.updatePolicy({ memoryThreshold: 0 }), "memoryThreshold");
    expectInvalid(() => f.core.updatePolicy({ memoryThreshold: 1.01 }), "memoryThreshold");
    expectInvalid(() => f.core.updatePolicy({ memoryReleaseThreshold: 0.99 }), "memoryReleaseThreshold");
    expectInvalid(() => f.core.updatePolicy({ limitPerNode: 3, idleTimeoutMs: -1 }), "idleTimeoutMs");
    expectInvalid(() => f.core.updatePolicy({ bogus: 1 } as never), "bogus");
    expectInvalid(() => f.core.updatePolicy({ modelGroups: { m: "g" } } as never), "modelGroups.m");
    expect(f.core.getPolicy().limitPerNode).toBe(0);
  });

  it("pins, groups and limits change without losing accounting", async () => {
    const f = createFixture();
    f.reg("a1", "m1");
    f.core.trackRequest("a1");
    f.reg("a2", "m2");
    f.core.updatePolicy({ limitPerNode: 2, pinnedModels: ["m2"], modelGroups: { m1: ["g"] } });
    expect(f.core.inFlight("a1")).toBe(1);
    expect(f.core.loadedCount()).toBe(2);
    // m1 busy, m2 pinned: the shortfall is not pins alone.
    expect(await f.svc.admit({ nodeId: "n1", model: "m3", incarnation: "m3" })).toMatchObject({ t: "waited", needMore: true });
    f.core.updatePolicy({ pinnedModels: [] });
    expect(await f.svc.admit({ nodeId: "n1", model: "m3", incarnation: "m3" })).toMatchObject({ evicted: 1 });
    expect(f.port.models()).toEqual(["m2"]);
  });

  it("registration writes the model's groups and pin into the policy tables", () => {
    const f = createFixture();
    f.core.registerLoading({ nodeId: "n1", model: "m", incarnation: "i", address: "a", groups: ["g"], pinned: true });
    expect(f.core.getPolicy()).toMatchObject({ pinnedModels: ["m"], modelGroups: { m: ["g"] } });
    expect(f.core.instance("i")).toMatchObject({ pinned: true, groups: ["g"] });
  });
});

describe("bad input and caps", () => {
  it("completions for unknown or cleared requests are no-ops; unmark on unknown addresses creates nothing", () => {
    const f = createFixture();
    f.core.unmark("nowhere");
    expect(f.core.snapshot().addresses).toEqual([]);
  });

  it("caller-keyed maps are capped", () => {
    const clock = new ManualClock();
    const core = createWatchdogCore({
      clock,
      loader: { hasModelAtAddress: () => true },
      caps: { maxAddresses: 2, maxOpenRequestsPerAddress: 2, maxInstances: 1, maxNodes: 1 },
    });
    core.trackRequest("a");
    core.trackRequest("a");
    expect(isWardenError(errorOf(() => core.trackRequest("a")), Code.ResourceExhausted)).toBe(true);
    core.trackRequest("b");
    expect(isWardenError(errorOf(() => core.trackRequest("c")), Code.ResourceExhausted)).toBe(true);
    core.registerLoading({ nodeId: "n", model: "m", incarnation: "i", address: "x" });
    expect(isWardenError(errorOf(() => core.admit({ nodeId: "n", model: "m2", incarnation: "j" })), Code.ResourceExhausted)).toBe(true);
    expect(isWardenError(errorOf(() => core.reportMemory("other", { gpus: [] })), Code.ResourceExhausted)).toBe(true);
  });

  it("unowned request state is garbage-collected by the tick after the idle timeout", () => {
    const f = createFixture({ idleTimeoutMs: 100 });
    const done = f.core.trackRequest("stray");
    done();
    f.clock.advance(101);
    expect(f.core.tick().untrackedAddresses).toEqual(["stray"]);
    expect(f.core.requestState("stray")).toBeUndefined();
  });

  it("names are validated", () => {
    const f = createFixture();
    expectInvalid(() => f.core.registerLoading({ nodeId: "", model: "m", incarnation: "i", address: "a" }), "nodeId");
    expectInvalid(() => f.core.registerLoading({ nodeId: "n", model: "m\u0000", incarnation: "i", address: "a" }), "model");
    expectInvalid(() => f.core.registerLoading({ nodeId: "n", model: "m", incarnation: "i", address: "a", sizeBytes: -1 }), "sizeBytes");
  });

  it("registering on an address held by another live incarnation is refused", () => {
    const f = createFixture();
    f.reg("a1", "m1");
    expect(isWardenError(errorOf(() => f.core.registerLoading({ nodeId: "n1", model: "m2", incarnation: "x", address: "a1" })), Code.FailedPrecondition)).toBe(
      true,
    );
  });
});

describe("snapshot", () => {
  it("lists every instance with node, address, incarnation, state, in-flight, busy/idle since, last used and pending eviction", () => {
    const f = createFixture();
    const a = f.reg("a1", "m1");
    f.core.trackRequest("a1");
    const b = f.reg("a2", "m2");
    f.core.selectExplicit(b, { reason: "admin" });
    f.core.admit({ nodeId: "n2", model: "m3", incarnation: "r" });
    const s = f.core.snapshot();
    expect(checkSnapshotInvariants(s)).toEqual([]);
    const byInc = new Map(s.instances.map((i) => [i.incarnation, i]));
    expect(byInc.get(a)).toMatchObject({ nodeId: "n1", address: "a1", state: "ready", inFlight: 1, pendingEviction: undefined });
    expect(byInc.get(a)?.busySinceMs).toBeDefined();
    expect(byInc.get(b)).toMatchObject({ state: "ready", pendingEviction: { reason: "admin" } });
    expect(byInc.get(b)?.idleSinceMs).toBeDefined();
    expect(byInc.get("r")).toMatchObject({ nodeId: "n2", state: "reserved", address: undefined });
    expect(s.loadedCount).toBe(1);
  });

  it("the invariant checker catches an inconsistent snapshot", () => {
    const f = createFixture();
    f.reg("a1", "m1");
    const s = f.core.snapshot();
    expect(checkSnapshotInvariants({ ...s, loadedCount: 5 })).not.toEqual([]);
  });
});

describe("stop outcome mapping", () => {
  it("NOT_FOUND is already gone; deadline and unavailable are failures; invalid argument is a bug", async () => {
    const { stopOutcomeFromError } = await import("./stop-command.js");
    expect(stopOutcomeFromError(new WardenError(Code.NotFound, "x"))).toEqual({ t: "alreadyGone" });
    expect(stopOutcomeFromError(new WardenError(Code.DeadlineExceeded, "x"), true)).toMatchObject({ t: "failed", freed: true, bug: false });
    expect(stopOutcomeFromError(new WardenError(Code.Unavailable, "x"))).toMatchObject({ t: "failed", code: Code.Unavailable });
    expect(stopOutcomeFromError(new WardenError(Code.InvalidArgument, "x"))).toMatchObject({ t: "failed", bug: true });
    expect(stopOutcomeFromError(new Error("boom"))).toMatchObject({ t: "failed", code: Code.Unknown, message: "boom" });
  });
});

describe("policy maxima (documented in @warden/common limits.ts)", () => {
  it("refuses durations and counts above their maxima, naming the field and applying nothing", () => {
    const f = createFixture();
    const before = f.core.getPolicy();
    expectInvalid(() => f.core.updatePolicy({ idleTimeoutMs: 2 ** 64 }), "idleTimeoutMs");
    expectInvalid(() => f.core.updatePolicy({ limitPerNode: 2, idleTimeoutMs: 30 * 86_400_000 + 1 }), "idleTimeoutMs");
    expectInvalid(() => f.core.updatePolicy({ busyTimeoutMs: 31 * 86_400_000 }), "busyTimeoutMs");
    expectInvalid(() => f.core.updatePolicy({ tickIntervalMs: 3_600_001 }), "tickIntervalMs");
    expectInvalid(() => f.core.updatePolicy({ limitPerNode: 1025 }), "limitPerNode");
    expectInvalid(() => f.core.updatePolicy({ memoryReleaseHoldMs: 2 ** 53 }), "memoryReleaseHoldMs");
    expect(f.core.getPolicy()).toEqual(before);
    f.core.updatePolicy({ idleTimeoutMs: 30 * 86_400_000, limitPerNode: 1024, tickIntervalMs: 3_600_000 });
    expect(f.core.getPolicy()).toMatchObject({ idleTimeoutMs: 30 * 86_400_000, limitPerNode: 1024, tickIntervalMs: 3_600_000 });
  });
});
