import { mkdtemp, mkdir, readdir, rm, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { Code, ManualClock, WardenError, nullLogger } from "@warden/common";
import { sha256Hex, startArtifactServer, type ArtifactServer } from "../../../test/support/artifact-server.js";
import { tarOf } from "../../../test/support/oci-registry.js";
import { ArtifactCache } from "./artifact-cache.js";
import { BundleInstaller } from "./backend-bundle.js";
import { diskUsage } from "./disk-usage.js";
import { liveCacheDigests } from "./live-cache-digests.js";

const hex = (c: string): string => c.repeat(64);
const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

/** A models path holding installed bundles (a directory with run.sh) and a verified file, each with its last-use time (mtime, as after a restart). */
async function cacheWith(bundles: Record<string, number>, files: Record<string, number>): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), "warden-bundle-budget-"));
  dirs.push(root);
  for (const [c, at] of Object.entries(bundles)) {
    const dir = join(root, ".warden-cache", "backends", hex(c));
    await mkdir(join(dir, "lib"), { recursive: true });
    await writeFile(join(dir, "run.sh"), "#!/bin/sh\n");
    await writeFile(join(dir, "lib", "blob"), Buffer.alloc(64 * 1024, 1));
    await utimes(dir, at, at);
  }
  await mkdir(join(root, ".warden-cache", "sha256"), { recursive: true });
  for (const [c, at] of Object.entries(files)) {
    const f = join(root, ".warden-cache", "sha256", hex(c));
    await writeFile(f, Buffer.alloc(64 * 1024, 2));
    await utimes(f, at, at);
  }
  return root;
}

function agentCache(modelsPath: string, budgetBytes: number, live: () => Iterable<readonly string[] | undefined> = () => []) {
  const evicted: { sha256: string; sizeBytes: number; reason: string }[] = [];
  const cache = new ArtifactCache({ modelsPath, clock: new ManualClock(), logger: nullLogger, pullTimeoutMs: 60_000, stallTimeoutMs: 60_000, storeReader: undefined, budgetBytes, freeBytes: () => Promise.resolve(2 ** 40), liveDigests: live, onEvicted: (e) => evicted.push(e) });
  const bundles = new BundleInstaller({ modelsPath, cache, logger: nullLogger });
  return { cache, bundles, evicted };
}

describe("installed bundles in the cache's disk budget", () => {
  it("counts them, evicts the least recently used one no start uses, removes it and stops listing it", async () => {
    // Last used: bundle b at t=100 (oldest), bundle a at 200, file f at 300.
    const root = await cacheWith({ a: 200, b: 100 }, { f: 300 });
    const sizeA = await diskUsage(join(root, ".warden-cache", "backends", hex("a")));
    const sizeB = await diskUsage(join(root, ".warden-cache", "backends", hex("b")));
    expect(sizeA).toBeGreaterThanOrEqual(64 * 1024);
    const held = sizeA + sizeB + 64 * 1024;
    const { cache, bundles, evicted } = agentCache(root, held);

    // Full budget: every held byte is evictable and no room is left.
    expect(await cache.index.report()).toMatchObject({ freeBytes: 0, evictableBytes: held });

    // A start is launching b: though least recently used, a goes instead.
    const releaseB = bundles.use(hex("b"));
    const room = await cache.index.makeRoom(hex("9"), 1);
    await room.done();
    expect(evicted).toEqual([{ sha256: hex("a"), sizeBytes: sizeA, reason: `least recently used (an installed backend bundle); room for ${hex("9")}` }]);
    expect(await readdir(join(root, ".warden-cache", "backends"))).toEqual([hex("b")]);
    expect((await bundles.list()).map((b) => b.sha256)).toEqual([hex("b")]);
    expect(await bundles.installed(hex("a"))).toBe(false);

    // Once the start let go, b (older than the file) is the next to go.
    releaseB();
    await (await cache.index.makeRoom(hex("8"), sizeA + 1)).done();
    expect(evicted.map((e) => e.sha256)).toEqual([hex("a"), hex("b")]);
    expect(await readdir(join(root, ".warden-cache", "backends"))).toEqual([]);
    expect(cache.index.digests()).toEqual([hex("f")]);
  });

  it("never evicts a running backend's bundle, nor when every unused thing is not enough", async () => {
    const root = await cacheWith({ a: 100 }, { f: 300 });
    const sizeA = await diskUsage(join(root, ".warden-cache", "backends", hex("a")));
    const catalog = { llama: { bundle: { source: "oci://r/x@sha256:" + hex("a"), sha256: hex("a") } } } as never;
    // A live backend adopted from a record naming no bundle: its catalog entry's bundle is kept.
    const { cache, evicted } = agentCache(root, sizeA + 64 * 1024, () => [liveCacheDigests({ backend: "llama", artifactDigests: [] }, catalog)]);
    await expect(cache.index.makeRoom(hex("9"), 64 * 1024 + 1)).rejects.toThrow(/no space left in the artifact cache/);
    expect(evicted).toEqual([]);
    await (await cache.index.makeRoom(hex("9"), 1)).done();
    expect(evicted.map((e) => e.sha256)).toEqual([hex("f")]);
    expect(await readdir(join(root, ".warden-cache", "backends"))).toEqual([hex("a")]);
  });

  it("a start's later use makes a bundle the most recently used", async () => {
    const root = await cacheWith({ a: 100, b: 200 }, {});
    const sizeA = await diskUsage(join(root, ".warden-cache", "backends", hex("a")));
    const sizeB = await diskUsage(join(root, ".warden-cache", "backends", hex("b")));
    const { cache, bundles, evicted } = agentCache(root, sizeA + sizeB);
    // ensure() of an installed bundle touches it (no install: it is there).
    await bundles.ensure({ source: "https://example.invalid/a.tar", sha256: hex("a") } as never, AbortSignal.timeout(10_000));
    await (await cache.index.makeRoom(hex("9"), 1)).done();
    expect(evicted.map((e) => e.sha256)).toEqual([hex("b")]);
  });
});

describe("a bundle's install in the disk budget", () => {
  let server: ArtifactServer;
  beforeAll(async () => {
    server = await startArtifactServer();
  });
  afterAll(async () => {
    await server.close();
  });

  /** An uncompressed tarball of `files` one-byte files and run.sh, served by the HTTP server. */
  function tarball(name: string, files: number): { source: string; sha256: string; sizeBytes: number } {
    const entries = [{ name: "run.sh", body: "#!/bin/sh\n", mode: 0o755 }, ...Array.from({ length: files }, (_, i) => ({ name: `f${String(i)}`, body: "x" }))];
    const body = tarOf(entries, false);
    server.files.set(`/${name}`, body);
    return { source: `${server.url}/${name}`, sha256: sha256Hex(body), sizeBytes: body.length };
  }

  async function failure(p: Promise<unknown>): Promise<WardenError> {
    const e: unknown = await p.then(() => undefined, (x: unknown) => x);
    if (!(e instanceof WardenError)) throw new Error(`expected a WardenError, got ${String(e)}`);
    return e;
  }

  it("makes room for the unpacked size on disk before the rename: blocks past the room fail RESOURCE_EXHAUSTED, nothing evicted, no staging left", async () => {
    // 100 one-byte files: 101 bytes by their sizes, within the bound, but 100 disk blocks once unpacked.
    const spec = tarball("blocks.tar", 100);
    const root = await cacheWith({}, { f: 100 });
    // Room for the tarball, the old 64 KiB file and 50 000 bytes more: far less than 100 blocks.
    const { bundles, evicted } = agentCache(root, spec.sizeBytes + 64 * 1024 + 50_000);
    const e = await failure(bundles.ensure(spec, AbortSignal.timeout(30_000)));
    expect(e.code).toBe(Code.ResourceExhausted);
    expect(e.rawMessage).toContain(`backend bundle ${spec.source} (sha256 ${spec.sha256}): no space left in the artifact cache: `);
    expect(e.rawMessage).toContain("bytes unpacked (the bundle's size on disk); a disk budget of");
    expect(evicted).toEqual([]);
    expect(await readdir(join(root, ".warden-cache", "backends"))).toEqual([]);
    expect((await readdir(join(root, ".warden-cache", "sha256"))).sort()).toEqual([hex("f"), spec.sha256].sort());
  });

  it("never counts its own tarball as room, also for an install no start holds a use of", async () => {
    const spec = tarball("own.tar", 0);
    const root = await cacheWith({}, {});
    // Exactly the tarball: unpacked beside it, run.sh has no room unless the tarball it is read from went.
    const { bundles, evicted } = agentCache(root, spec.sizeBytes);
    const e = await failure(bundles.ensure(spec, AbortSignal.timeout(30_000)));
    expect([e.code, e.rawMessage]).toEqual([Code.ResourceExhausted, `backend bundle ${spec.source} (sha256 ${spec.sha256}): no space left in the artifact cache: the bundle unpacks to more than 0 bytes; a disk budget of ${String(spec.sizeBytes)} bytes with ${String(spec.sizeBytes)} held, ${String(2 ** 40)} free on the file system; evicting every file no backend uses would free 0 (${String(spec.sizeBytes)} in use)`]);
    expect(evicted).toEqual([]);
    expect(await readdir(join(root, ".warden-cache", "sha256"))).toEqual([spec.sha256]);
    expect(await readdir(join(root, ".warden-cache", "backends"))).toEqual([]);
  });
});

describe("liveCacheDigests", () => {
  it("adds the record's bundle, else the catalog entry's; unknown artifacts stay unknown", () => {
    const catalog = { x: { bundle: { source: "s", sha256: hex("c") } } } as never;
    expect(liveCacheDigests({ backend: "x", artifactDigests: [hex("1")], bundleDigest: hex("d") }, catalog)).toEqual([hex("1"), hex("d")]);
    expect(liveCacheDigests({ backend: "x", artifactDigests: [] }, catalog)).toEqual([hex("c")]);
    expect(liveCacheDigests({ backend: "y", artifactDigests: [hex("1")] }, catalog)).toEqual([hex("1")]);
    expect(liveCacheDigests({ backend: "x" }, catalog)).toBeUndefined();
  });
});
