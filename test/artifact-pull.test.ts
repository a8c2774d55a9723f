import { execFileSync } from "node:child_process";
import { mkdir, mkdtemp, readFile, readdir, rm, stat, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { Code, WardenError, nullLogger, systemClock, type ArtifactSpec } from "@warden/common";
import { ArtifactCache } from "../services/agent/src/artifact-cache.js";
import { cachePaths, type PullProgress } from "../services/agent/src/artifact-pull.js";
import { bytesOf, sha256Hex, startArtifactServer, type ArtifactServer } from "./support/artifact-server.js";

// The agent's artifact cache against a real HTTP server (node:http): what
// lands on disk, what the server is asked for, and what each failure leaves.
let server: ArtifactServer;
let root: string;
let n = 0;

beforeAll(async () => {
  server = await startArtifactServer();
});
afterAll(async () => {
  await server.close();
});
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), "warden-artifact-pull-"));
  server.ranges = true;
  server.dropAfterBytes = undefined;
  server.chunkBytes = 64 * 1024;
  server.paceMs = 0;
});

/** A fresh file on the server and its spec. */
function publish(size: number, name = `m${String(++n)}.bin`): { spec: ArtifactSpec; body: Buffer } {
  const body = bytesOf(size, n + 7);
  server.files.set(`/${name}`, body);
  return { spec: { source: `${server.url}/${name}`, sha256: sha256Hex(body), sizeBytes: size, path: name }, body };
}

function cache(o: { stallTimeoutMs?: number; freeBytes?: (dir: string) => Promise<number>; modelsPath?: string } = {}): ArtifactCache {
  return new ArtifactCache({ modelsPath: o.modelsPath ?? root, clock: systemClock, logger: nullLogger, pullTimeoutMs: 60_000, stallTimeoutMs: o.stallTimeoutMs ?? 20_000, storeReader: undefined, ...(o.freeBytes === undefined ? {} : { freeBytes: o.freeBytes }) });
}

async function failure(p: Promise<unknown>): Promise<WardenError> {
  const err = await p.then(() => undefined, (e: unknown) => e);
  expect(err).toBeInstanceOf(WardenError);
  return err as WardenError;
}

async function sizeOrUndefined(path: string): Promise<number | undefined> {
  return stat(path).then((s) => s.size, () => undefined);
}

describe("artifact pull", () => {
  it("pulls into .warden-cache/sha256/<hex>, verified, with progress ending verified and no partial left", async () => {
    const { spec, body } = publish(300_000);
    const seen: PullProgress[] = [];
    const path = await cache().ensure(spec, new AbortController().signal, (p) => seen.push(p));
    expect(path).toBe(join(root, ".warden-cache", "sha256", spec.sha256));
    expect((await readFile(path)).equals(body)).toBe(true);
    expect(seen[0]).toMatchObject({ doneBytes: 0, totalBytes: 300_000, verified: false });
    expect(seen[seen.length - 1]).toMatchObject({ doneBytes: 300_000, verified: true });
    expect(await readdir(join(root, ".warden-cache", "partial"))).toEqual([]);
  });

  it("uses a file already in place with the right digest (a shared volume) without asking the source", async () => {
    const { spec, body } = publish(1000);
    const { final } = cachePaths(root, spec.sha256);
    await mkdir(join(root, ".warden-cache", "sha256"), { recursive: true });
    await writeFile(final, body);
    expect(await cache().ensure(spec, new AbortController().signal, () => {})).toBe(final);
    expect(server.requestsFor(`/${spec.path}`)).toEqual([]);
  });

  it("replaces a file in place whose bytes do not match its name", async () => {
    const { spec, body } = publish(1000);
    const { final } = cachePaths(root, spec.sha256);
    await mkdir(join(root, ".warden-cache", "sha256"), { recursive: true });
    await writeFile(final, bytesOf(1000, 999));
    await cache().ensure(spec, new AbortController().signal, () => {});
    expect((await readFile(final)).equals(body)).toBe(true);
    expect(server.requestsFor(`/${spec.path}`)).toHaveLength(1);
  });

  it("a cached file changed on disk since it was verified is hashed again and replaced", async () => {
    const { spec, body } = publish(5_000);
    const c = cache();
    const final = await c.ensure(spec, new AbortController().signal, () => {});
    await c.ensure(spec, new AbortController().signal, () => {});
    expect(server.requestsFor(`/${spec.path}`)).toHaveLength(1);
    await writeFile(final, bytesOf(5_000, 31337));
    await c.ensure(spec, new AbortController().signal, () => {});
    expect((await readFile(final)).equals(body)).toBe(true);
    expect(server.requestsFor(`/${spec.path}`)).toHaveLength(2);
  });

  it("follows redirects (a model hub's CDN)", async () => {
    const { spec, body } = publish(5_000);
    server.redirects.set("/hub/model.bin", `${server.url}/${spec.path}`);
    const path = await cache().ensure({ ...spec, source: `${server.url}/hub/model.bin` }, new AbortController().signal, () => {});
    expect((await readFile(path)).equals(body)).toBe(true);
    expect(server.requestsFor("/hub/model.bin")).toHaveLength(1);
  });

  it("a connection dropped mid-file fails UNAVAILABLE and keeps the partial; the next pull resumes it with Range", async () => {
    const { spec, body } = publish(500_000);
    server.dropAfterBytes = 200_000;
    const e = await failure(cache().ensure(spec, new AbortController().signal, () => {}));
    expect(e.code).toBe(Code.Unavailable);
    expect(e.rawMessage).toContain(`sha256 ${spec.sha256}`);
    expect(e.rawMessage).toContain(spec.source);
    const { partial, final } = cachePaths(root, spec.sha256);
    const kept = await sizeOrUndefined(partial);
    expect(kept).toBeGreaterThan(0);
    expect(await sizeOrUndefined(final)).toBeUndefined();
    server.dropAfterBytes = undefined;
    await cache().ensure(spec, new AbortController().signal, () => {});
    const reqs = server.requestsFor(`/${spec.path}`);
    expect(reqs.map((r) => r.range)).toEqual([undefined, `bytes=${String(kept)}-`]);
    expect((await readFile(final)).equals(body)).toBe(true);
  });

  it("a server without Range support restarts from 0 and still verifies", async () => {
    const { spec, body } = publish(200_000);
    const { partial, final } = cachePaths(root, spec.sha256);
    await mkdir(join(root, ".warden-cache", "partial"), { recursive: true });
    await writeFile(partial, body.subarray(0, 50_000));
    server.ranges = false;
    await cache().ensure(spec, new AbortController().signal, () => {});
    expect(server.requestsFor(`/${spec.path}`).map((r) => r.range)).toEqual(["bytes=50000-"]);
    expect((await readFile(final)).equals(body)).toBe(true);
  });

  it("a partial that is no prefix of the file fails the digest check and is removed", async () => {
    const { spec } = publish(100_000);
    const { partial, final } = cachePaths(root, spec.sha256);
    await mkdir(join(root, ".warden-cache", "partial"), { recursive: true });
    await writeFile(partial, bytesOf(40_000, 4242));
    const e = await failure(cache().ensure(spec, new AbortController().signal, () => {}));
    expect(e.code).toBe(Code.DataLoss);
    expect(await sizeOrUndefined(partial)).toBeUndefined();
    expect(await sizeOrUndefined(final)).toBeUndefined();
    // the next pull starts from 0 and succeeds
    await cache().ensure(spec, new AbortController().signal, () => {});
    expect(server.requestsFor(`/${spec.path}`).map((r) => r.range)).toEqual(["bytes=40000-", undefined]);
  });

  it("a wrong digest fails DATA_LOSS naming the artifact and leaves nothing behind", async () => {
    const { spec } = publish(10_000);
    const wrong = { ...spec, sha256: "0".repeat(64) };
    const e = await failure(cache().ensure(wrong, new AbortController().signal, () => {}));
    expect(e.code).toBe(Code.DataLoss);
    expect(e.rawMessage).toContain(`sha256 ${wrong.sha256}`);
    expect(e.rawMessage).toContain(`hash to sha256 ${spec.sha256}`);
    expect(await readdir(join(root, ".warden-cache", "partial"))).toEqual([]);
    expect(await readdir(join(root, ".warden-cache", "sha256"))).toEqual([]);
  });

  it("a size the source disagrees with is DATA_LOSS before any byte is kept", async () => {
    const { spec } = publish(10_000);
    const e = await failure(cache().ensure({ ...spec, sizeBytes: 9_999 }, new AbortController().signal, () => {}));
    expect(e.code).toBe(Code.DataLoss);
    expect(e.rawMessage).toContain("10000 bytes");
  });

  it("404 is NOT_FOUND; a refused connection is UNAVAILABLE", async () => {
    const missing = { source: `${server.url}/nope.bin`, sha256: "1".repeat(64), sizeBytes: 10, path: "nope.bin" };
    const e404 = await failure(cache().ensure(missing, new AbortController().signal, () => {}));
    expect(e404.code).toBe(Code.NotFound);
    expect(e404.rawMessage).toContain("HTTP 404");
    // a port nobody listens on: bound, closed
    const port = await new Promise<number>((resolve) => {
      const s = createServer().listen(0, "127.0.0.1", () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => { resolve(p); });
      });
    });
    const dead = { ...missing, source: `http://127.0.0.1:${String(port)}/x.bin` };
    const eDead = await failure(cache().ensure(dead, new AbortController().signal, () => {}));
    expect(eDead.code).toBe(Code.Unavailable);
    expect(eDead.rawMessage).toContain("ECONNREFUSED");
  });

  it("a source that stops sending fails UNAVAILABLE after the stall timeout, keeping its partial", async () => {
    const { spec } = publish(400_000);
    server.chunkBytes = 100_000;
    server.paceMs = 60_000;
    const e = await failure(cache({ stallTimeoutMs: 2_000 }).ensure(spec, new AbortController().signal, () => {}));
    expect(e.code).toBe(Code.Unavailable);
    expect(e.rawMessage).toContain("sent no byte for 2000ms");
    expect(await sizeOrUndefined(cachePaths(root, spec.sha256).partial)).toBe(100_000);
  });

  it("not enough free space fails RESOURCE_EXHAUSTED before downloading", async () => {
    const { spec } = publish(10_000);
    const e = await failure(cache({ freeBytes: async () => 5_000 }).ensure(spec, new AbortController().signal, () => {}));
    expect(e.code).toBe(Code.ResourceExhausted);
    expect(e.rawMessage).toContain("10000 bytes to fetch; no disk budget, 5000 free on the file system");
    expect(server.requestsFor(`/${spec.path}`)).toEqual([]);
  });

  it("a disk that fills up mid-pull (ENOSPC on a 1 MiB tmpfs) fails RESOURCE_EXHAUSTED naming the artifact", async () => {
    const mnt = join(root, "tiny");
    await mkdir(mnt);
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt]);
    try {
      const { spec } = publish(3_000_000);
      // statfs says there is room (the check is passed on purpose): the write itself hits ENOSPC
      const e = await failure(cache({ modelsPath: mnt, freeBytes: async () => Number.MAX_SAFE_INTEGER }).ensure(spec, new AbortController().signal, () => {}));
      expect(e.code).toBe(Code.ResourceExhausted);
      expect(e.rawMessage).toContain(`sha256 ${spec.sha256}`);
      expect(e.rawMessage).toContain("disk full");
      expect(await readdir(join(mnt, ".warden-cache", "sha256"))).toEqual([]);
    } finally {
      execFileSync("umount", [mnt]);
    }
  });

  it("concurrent pulls of one digest make one request; one waiter giving up does not stop the others", async () => {
    const { spec, body } = publish(400_000);
    server.chunkBytes = 50_000;
    server.paceMs = 20;
    const c = cache();
    const quitter = new AbortController();
    const waits = [c.ensure(spec, new AbortController().signal, () => {}), c.ensure(spec, quitter.signal, () => {}), c.ensure(spec, new AbortController().signal, () => {})];
    quitter.abort(new WardenError(Code.Canceled, "caller went away"));
    const results = await Promise.allSettled(waits);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect(server.requestsFor(`/${spec.path}`)).toHaveLength(1);
    expect((await readFile(cachePaths(root, spec.sha256).final)).equals(body)).toBe(true);
    expect(c.pulling()).toBe(0);
  });

  it("the pull stops when every waiter gave up, keeping its partial", async () => {
    const { spec } = publish(400_000);
    server.chunkBytes = 50_000;
    server.paceMs = 200;
    const c = cache();
    const a = new AbortController();
    const { partial } = cachePaths(root, spec.sha256);
    const p = c.ensure(spec, a.signal, () => {});
    // wait for some bytes on disk, then leave
    for (let i = 0; i < 400 && ((await sizeOrUndefined(partial)) ?? 0) === 0; i++) await new Promise((r) => setTimeout(r, 25));
    a.abort(new WardenError(Code.Canceled, "gone"));
    expect((await failure(p)).code).toBe(Code.Canceled);
    for (let i = 0; i < 400 && c.pulling() > 0; i++) await new Promise((r) => setTimeout(r, 25));
    expect(c.pulling()).toBe(0);
    expect(await sizeOrUndefined(partial)).toBeGreaterThan(0);
  });
});

afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});
