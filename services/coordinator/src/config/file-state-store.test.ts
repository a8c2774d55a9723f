import { readFileSync } from "node:fs";
import { mkdtemp, readFile, readdir, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { Code, isWardenError, nullLogger } from "@warden/common";
import { DurableSettings } from "../ha/durable-settings.js";
import { FileStateStore, operatorSettingsFile } from "./file-state-store.js";

const dirs: string[] = [];
async function tempDir(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), "warden-file-state-"));
  dirs.push(d);
  return d;
}
afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

describe("FileStateStore (the single coordinator's operator settings)", () => {
  it("keeps every section across a reopen, in one owner-only file, with the port's revisions", async () => {
    const dir = await tempDir();
    const s = await FileStateStore.open(dir);
    const r1 = await s.put("drain", "b", { force: false, sinceWallMs: 1 }, 0);
    const r2 = await s.put("policy", "cluster", { patch: { idleTimeoutMs: 30_000 }, models: {} }, 0);
    await s.put("node-limits", "a", { maxReplicasPerModel: 2 }, 0);
    await s.remove("node-limits", "a", 3);
    expect([r1, r2]).toEqual([1, 2]);
    expect((await stat(join(dir, operatorSettingsFile))).mode & 0o777).toBe(0o600);
    // No temporary file left behind.
    expect(await readdir(dir)).toEqual([operatorSettingsFile]);

    const again = await FileStateStore.open(dir);
    expect([...(await again.load("drain"))]).toEqual([["b", { value: { force: false, sinceWallMs: 1 }, revision: 1 }]]);
    expect((await again.get("policy", "cluster"))?.value).toEqual({ patch: { idleTimeoutMs: 30_000 }, models: {} });
    expect((await again.load("node-limits")).size).toBe(0);
    // The revision counter goes on from the file's: a stale revision is refused, nothing written.
    const before = await readFile(join(dir, operatorSettingsFile), "utf8");
    await expect(again.put("drain", "b", { force: true, sinceWallMs: 2 }, 0)).rejects.toSatisfy((e: unknown) => isWardenError(e, Code.Aborted));
    expect(await readFile(join(dir, operatorSettingsFile), "utf8")).toBe(before);
    expect(await again.put("drain", "b", { force: true, sinceWallMs: 2 }, 1)).toBe(5);
  });

  it("drives DurableSettings as HA's bucket does: a change is on disk before it applies", async () => {
    const dir = await tempDir();
    const { settings } = await DurableSettings.load(await FileStateStore.open(dir), nullLogger);
    let onDisk = "";
    await settings.change("drain", "b", () => ({
      t: "put",
      value: { force: false, sinceWallMs: 7 },
      apply: () => {
        // Applied only after the store acknowledged: the file already holds it.
        onDisk = readFileSync(join(dir, operatorSettingsFile), "utf8");
      },
    }));
    expect(JSON.parse(onDisk)).toMatchObject({ version: 1, entries: { drain: { b: { value: { force: false, sinceWallMs: 7 } } } } });
    await settings.change("drain", "b", () => ({ t: "remove", apply: () => undefined }));
    const { loaded } = await DurableSettings.load(await FileStateStore.open(dir), nullLogger);
    expect(loaded.get("drain")?.size).toBe(0);
  });

  it("refuses to start on a file it cannot understand, naming the file (never drops the settings silently)", async () => {
    for (const text of ["{not json", JSON.stringify({ version: 2, revision: 0, entries: {} }), JSON.stringify({ version: 1, revision: 1, entries: { nonsense: {} } }), JSON.stringify({ version: 1, revision: 1, entries: { drain: { b: { value: {}, revision: 9 } } } })]) {
      const dir = await tempDir();
      await writeFile(join(dir, operatorSettingsFile), text);
      const err = await FileStateStore.open(dir).catch((e: unknown) => e);
      expect(isWardenError(err, Code.FailedPrecondition)).toBe(true);
      expect((err as Error).message).toContain(join(dir, operatorSettingsFile));
      expect(await readFile(join(dir, operatorSettingsFile), "utf8")).toBe(text);
    }
  });

  it("bounds a value and the file: over a bound is INVALID_ARGUMENT and the file is unchanged", async () => {
    const dir = await tempDir();
    const s = await FileStateStore.open(dir, { maxValueBytes: 100, maxFileBytes: 4096 });
    await s.put("drain", "a", { force: false, sinceWallMs: 1 }, 0);
    const before = await readFile(join(dir, operatorSettingsFile), "utf8");
    await expect(s.put("drain", "b", { pad: "x".repeat(200) }, 0)).rejects.toSatisfy((e: unknown) => isWardenError(e, Code.InvalidArgument) && (e as Error).message.includes("value"));
    for (let i = 0; i < 60; i++) await s.put("forgotten", `inc-${String(i)}`, { pad: "x".repeat(50) }, 0).catch(() => undefined);
    const size = (await stat(join(dir, operatorSettingsFile))).size;
    expect(size).toBeLessThanOrEqual(4096);
    expect(before.length).toBeLessThan(size);
    await expect(s.put("forgotten", "one-more", { pad: "x".repeat(50) }, 0)).rejects.toSatisfy((e: unknown) => isWardenError(e, Code.InvalidArgument));
    expect((await stat(join(dir, operatorSettingsFile))).size).toBe(size);
    // A file over the bound (written by hand, or with a larger bound before) is refused at open, named.
    await writeFile(join(dir, operatorSettingsFile), " ".repeat(5000));
    await expect(FileStateStore.open(dir, { maxFileBytes: 4096 })).rejects.toThrow(join(dir, operatorSettingsFile));
  });
});
