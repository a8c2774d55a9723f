import { describe, expect, it } from "vitest";
import { Code, WardenError, invalidArgument, isWardenError, nullLogger } from "@warden/common";
import { DurableSettings, inMemorySettings } from "./durable-settings.js";
import { MemoryStateStore } from "./memory-state-store.fixture.js";

const rejection = async (p: Promise<unknown>): Promise<WardenError> => {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  if (!(e instanceof WardenError)) throw new Error(`expected a WardenError, got ${String(e)}`);
  return e;
};

async function open(store = new MemoryStateStore()): Promise<{ store: MemoryStateStore; settings: DurableSettings }> {
  const { settings } = await DurableSettings.load(store, nullLogger);
  return { store, settings };
}

describe("durable settings: validate, write, acknowledge, then apply", () => {
  it("applies only after the store acknowledged the write", async () => {
    const { store, settings } = await open();
    store.gate();
    let applied = false;
    const p = settings.change("drain", "a", () => ({ t: "put", value: { force: false, sinceWallMs: 1 }, apply: () => (applied = true) }));
    // Several turns pass while the write is held: nothing applied yet.
    for (let i = 0; i < 5; i++) await Promise.resolve();
    expect(applied).toBe(false);
    expect(store.peek("drain", "a")).toBeUndefined();
    store.release();
    await p;
    expect(applied).toBe(true);
    expect(store.peek("drain", "a")).toEqual({ force: false, sinceWallMs: 1 });
  });

  it("a refused step writes nothing; a failed write applies nothing and answers UNAVAILABLE naming the store", async () => {
    const { store, settings } = await open();
    const refused = await rejection(
      settings.change("scale", "m", () => {
        throw invalidArgument("min", "must not exceed max");
      }),
    );
    expect(refused.code).toBe(Code.InvalidArgument);
    expect(store.writes).toBe(0);

    store.unavailable = true;
    let applied = false;
    const down = await rejection(settings.change("scale", "m", () => ({ t: "put", value: { min: 1 }, apply: () => (applied = true) })));
    expect(down.code).toBe(Code.Unavailable);
    expect(down.message).toContain(store.name);
    expect(applied).toBe(false);
    expect(store.peek("scale", "m")).toBeUndefined();
  });

  it("serialises one key's changes: the second step sees what the first applied", async () => {
    const { store, settings } = await open();
    store.gate();
    const log: string[] = [];
    let state = 0;
    const first = settings.change("policy", "cluster", () => {
      log.push(`step1 sees ${String(state)}`);
      return { t: "put", value: { v: 1 }, apply: () => (state = 1) };
    });
    const second = settings.change("policy", "cluster", () => {
      log.push(`step2 sees ${String(state)}`);
      return { t: "put", value: { v: 2 }, apply: () => (state = 2) };
    });
    for (let i = 0; i < 5; i++) await Promise.resolve();
    expect(log).toEqual(["step1 sees 0"]);
    store.release();
    await first;
    await second;
    expect(log).toEqual(["step1 sees 0", "step2 sees 1"]);
    expect(state).toBe(2);
    expect(store.peek("policy", "cluster")).toEqual({ v: 2 });
  });

  it("ABORTED (another coordinator wrote the key) refuses the call and every later one; nothing applied", async () => {
    const { store, settings } = await open();
    await settings.change("drain", "a", () => ({ t: "put", value: { force: false, sinceWallMs: 1 }, apply: () => undefined }));
    // An old leader waking up, or the new one: the key moved on without us.
    store.foreignPut("drain", "a", { force: true, sinceWallMs: 2 });
    let applied = 0;
    const aborted = await rejection(settings.change("drain", "a", () => ({ t: "remove", apply: () => applied++ })));
    expect(aborted.code).toBe(Code.Aborted);
    expect(aborted.message).toMatch(/stale/);
    expect(store.peek("drain", "a")).toEqual({ force: true, sinceWallMs: 2 });
    const later = await rejection(settings.change("scale", "m", () => ({ t: "put", value: {}, apply: () => applied++ })));
    expect(later.code).toBe(Code.FailedPrecondition);
    expect(later.message).toMatch(/stale/);
    expect(applied).toBe(0);
    expect(store.peek("scale", "m")).toBeUndefined();
  });

  it("a write of unknown outcome is read back before the key's next change: its own landed write is not taken for another coordinator's", async () => {
    const { store, settings } = await open();
    store.failNext = "landed";
    const e = await rejection(settings.change("lost-node", "b", () => ({ t: "put", value: { reason: "x", atWallMs: 1 }, apply: () => undefined })));
    expect(e.code).toBe(Code.Unavailable);
    // The next change goes on from the revision that landed.
    await settings.change("lost-node", "b", () => ({ t: "remove", apply: () => undefined }));
    expect(store.peek("lost-node", "b")).toBeUndefined();

    store.failNext = "lost";
    await rejection(settings.change("lost-node", "c", () => ({ t: "put", value: { reason: "y", atWallMs: 1 }, apply: () => undefined })));
    await settings.change("lost-node", "c", () => ({ t: "put", value: { reason: "z", atWallMs: 2 }, apply: () => undefined }));
    expect(store.peek("lost-node", "c")).toEqual({ reason: "z", atWallMs: 2 });

    // Unknown outcome, then someone else wrote: stale.
    store.failNext = "lost";
    await rejection(settings.change("lost-node", "d", () => ({ t: "put", value: { reason: "1", atWallMs: 1 }, apply: () => undefined })));
    store.foreignPut("lost-node", "d", { reason: "other", atWallMs: 3 });
    const stale = await rejection(settings.change("lost-node", "d", () => ({ t: "remove", apply: () => undefined })));
    expect(stale.code).toBe(Code.Aborted);
  });

  it("load reads every section with its revisions: the next write is checked against them", async () => {
    const store = new MemoryStateStore();
    store.foreignPut("node-limits", "c", { maxReplicasPerModel: 2 });
    const { settings, loaded } = await DurableSettings.load(store, nullLogger);
    expect(loaded.get("node-limits")?.get("c")?.value).toEqual({ maxReplicasPerModel: 2 });
    expect(settings.has("node-limits", "c")).toBe(true);
    await settings.change("node-limits", "c", () => ({ t: "put", value: { maxReplicasPerModel: 3 }, apply: () => undefined }));
    expect(store.peek("node-limits", "c")).toEqual({ maxReplicasPerModel: 3 });
    store.unavailable = true;
    expect(isWardenError(await DurableSettings.load(store, nullLogger).catch((e: unknown) => e), Code.Unavailable)).toBe(true);
  });

  it("without a store (single machine) the change applies in the caller's turn", () => {
    let applied = false;
    void inMemorySettings.change("drain", "a", () => ({ t: "put", value: {}, apply: () => (applied = true) }));
    expect(applied).toBe(true);
  });
});
