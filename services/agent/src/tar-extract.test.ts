import { lstat, mkdir, mkdtemp, readFile, readdir, readlink, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { tarOf, type TarEntry } from "../../../test/support/oci-registry.js";
import { Code, WardenError } from "@warden/common";
import { checkLinkTarget, extractLayer, safeEntryPath, tarNoRoomReason, unsafeBundleReason, type TarLimits } from "./tar-extract.js";

const big: TarLimits = { maxTotalBytes: 1 << 20, maxEntries: 1000 };
let dir: string;
let dest: string;
let n = 0;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-tar-"));
  dest = join(dir, "out");
  await mkdir(dest);
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function unpack(entries: readonly TarEntry[], limits = big, gzip = true): Promise<void> {
  const f = join(dir, `layer-${String(++n)}.tar`);
  await writeFile(f, tarOf(entries, gzip));
  await extractLayer(f, dest, limits, { bytes: 0, entries: 0 }, AbortSignal.timeout(30_000));
}

describe("tar extraction", () => {
  it("unpacks files, directories, modes, links inside the tree, plain and gzipped", async () => {
    await unpack([
      { name: "./", type: "5" },
      { name: "run.sh", body: "#!/bin/sh\n", mode: 0o4755 },
      { name: "lib/", type: "5" },
      { name: "lib/a.py", body: "x".repeat(700) },
      { name: "lib/b.py", type: "2", link: "a.py" },
      { name: "lib/c.py", type: "1", link: "lib/a.py" },
    ]);
    await unpack([{ name: "extra.txt", body: "plain" }], big, false);
    expect((await readdir(dest)).sort()).toEqual(["extra.txt", "lib", "run.sh"]);
    // setuid dropped, executable kept
    expect((await lstat(join(dest, "run.sh"))).mode & 0o7777).toBe(0o755);
    expect(await readFile(join(dest, "lib", "a.py"), "utf8")).toBe("x".repeat(700));
    expect(await readlink(join(dest, "lib", "b.py"))).toBe("a.py");
    expect(await readFile(join(dest, "lib", "c.py"), "utf8")).toBe("x".repeat(700));
    expect(await readFile(join(dest, "extra.txt"), "utf8")).toBe("plain");
  });

  it("applies OCI whiteouts of lower layers, keeping the layer's own files", async () => {
    await unpack([{ name: "keep.txt", body: "k" }, { name: "gone.txt", body: "g" }, { name: "d/old.txt", body: "o" }]);
    await unpack([{ name: ".wh.gone.txt" }, { name: "d/new.txt", body: "n" }, { name: "d/.wh..wh..opq" }]);
    expect((await readdir(dest)).sort()).toEqual(["d", "keep.txt"]);
    expect(await readdir(join(dest, "d"))).toEqual(["new.txt"]);
  });

  it("refuses every escape and bound, naming it", async () => {
    const cases: [readonly TarEntry[], string, TarLimits?][] = [
      [[{ name: "../evil", body: "x" }], '".." segment'],
      [[{ name: "a/../../evil", body: "x" }], '".." segment'],
      [[{ name: "/etc/evil", body: "x" }], "absolute entry path"],
      [[{ name: "l", type: "2", link: "/etc" }], "absolute path"],
      [[{ name: "a/l", type: "2", link: "../../x" }], "points out of the directory"],
      [[{ name: "l", type: "2", link: "." }, { name: "l/x", body: "x" }], "written through the symlink"],
      [[{ name: "h", type: "1", link: "../outside" }], '".." segment'],
      [[{ name: "h", type: "1", link: "missing" }], "not a regular file"],
      [[{ name: "dev", type: "3" }], "device or fifo"],
      [[{ name: "a", body: "x".repeat(600) }, { name: "b", body: "x".repeat(600) }], "more than 1000 bytes", { maxTotalBytes: 1000, maxEntries: 10 }],
      [[{ name: "a" }, { name: "b" }, { name: "c" }], "more than 2 entries", { maxTotalBytes: 1000, maxEntries: 2 }],
      [[{ name: "a", body: "x", sizeOverride: 5000 }], "ends inside an entry"],
    ];
    for (const [entries, why, limits] of cases) {
      await expect(unpack(entries, limits), why).rejects.toThrow(why);
    }
    // nothing was written outside the destination
    expect((await readdir(dir)).filter((f) => !f.startsWith("layer-"))).toEqual(["out"]);
  });

  it("stops at the room it is given as RESOURCE_EXHAUSTED, not an unsafe archive, before creating the file that passes it; the room counts across layers", async () => {
    const room: TarLimits = { ...big, roomBytes: 1000 };
    const tally = { bytes: 0, entries: 0 };
    const layer = async (entries: readonly TarEntry[]): Promise<unknown> => {
      const f = join(dir, `layer-${String(++n)}.tar`);
      await writeFile(f, tarOf(entries));
      return extractLayer(f, dest, room, tally, AbortSignal.timeout(30_000)).then(() => undefined, (err: unknown) => err);
    };
    expect(await layer([{ name: "a", body: "x".repeat(600) }])).toBeUndefined();
    const err = await layer([{ name: "b", body: "x".repeat(400) }, { name: "c", body: "x".repeat(1) }]);
    expect(err).toBeInstanceOf(WardenError);
    const e = err as WardenError;
    expect([e.code, e.details.reason, e.rawMessage]).toEqual([Code.ResourceExhausted, tarNoRoomReason, "more than 1000 bytes unpacked"]);
    expect((await readdir(dest)).sort()).toEqual(["a", "b"]);
    // The archive's own bound is still the unsafe one, whatever the room.
    const unsafe = await unpack([{ name: "d", body: "x".repeat(2000) }], { maxTotalBytes: 1500, maxEntries: 10, roomBytes: 1_000_000 }).then(() => undefined, (x: unknown) => x);
    expect((unsafe as WardenError).details.reason).toBe(unsafeBundleReason);
  });

  it("does not write through a symlink a lower layer left where a file goes", async () => {
    await writeFile(join(dir, "victim"), "original");
    await symlink(join(dir, "victim"), join(dest, "run.sh"));
    await unpack([{ name: "run.sh", body: "new" }]);
    expect(await readFile(join(dir, "victim"), "utf8")).toBe("original");
    expect((await lstat(join(dest, "run.sh"))).isFile()).toBe(true);
  });

  it("refuses what is not a tar archive", async () => {
    const f = join(dir, "junk");
    await writeFile(f, Buffer.alloc(2048, 7));
    await expect(extractLayer(f, dest, big, { bytes: 0, entries: 0 }, AbortSignal.timeout(30_000))).rejects.toThrow("wrong checksum");
  });

  it("path and link checks", () => {
    expect(safeEntryPath("./a//b/")).toBe("a/b");
    expect(safeEntryPath("./")).toBe("");
    expect(() => { checkLinkTarget("a/b/l", "../c"); }).not.toThrow();
    expect(() => { checkLinkTarget("a/l", "../../c"); }).toThrow("out of the directory");
  });
});
