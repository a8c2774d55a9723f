/**
 * The agent's OCI registry client and backend bundle installer against
 * Debian's real `docker-registry`, images pushed by `skopeo copy`: manifests
 * by tag and by digest, blobs verified into the artifact cache and resumed
 * with Range, the Bearer token dance (a node:http gate in front of the
 * registry that demands a token, as Docker Hub or GHCR do), and each failure
 * mode as a clear typed error. Needs /usr/bin/docker-registry and
 * /usr/bin/skopeo (.ci/run installs them from apt).
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { mkdir, readFile, readdir, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, WardenError, nullLogger, systemClock, type ArtifactSpec } from "@warden/common";
import { ArtifactCache } from "../services/agent/src/artifact-cache.js";
import { cachePaths } from "../services/agent/src/artifact-pull.js";
import { BundleInstaller } from "../services/agent/src/backend-bundle.js";
import { checkBundle } from "../services/agent/src/backend-bundle-config.js";
import { OciRegistryClient } from "../services/agent/src/oci-registry.js";
import { tempDir } from "./support/agent-harness.js";
import { bytesOf, sha256Hex, startArtifactServer, type ArtifactServer } from "./support/artifact-server.js";
import { pushImage, sha256Of, startRegistry, tarOf, type BuiltImage, type Registry } from "./support/oci-registry.js";

let dir: string;
let registry: Registry;
let gate: {
  server: Server;
  host: string;
  requests: { path: string; auth: string | undefined; range: string | undefined }[];
  corruptManifests: boolean;
  /** When set, the token realm wants this Authorization (HTTP Basic): 401 otherwise, 403 for the user "mallory". */
  tokenLogin: string | undefined;
  /** The Authorization each token request carried. */
  tokenAuth: (string | undefined)[];
};
let files: ArtifactServer;
let modelImage: BuiltImage;
let bundleImage: BuiltImage;
let n = 0;

function cache(): { cache: ArtifactCache; modelsPath: string } {
  const modelsPath = join(dir, `models-${String(++n)}`);
  return { modelsPath, cache: new ArtifactCache({ modelsPath, clock: systemClock, logger: nullLogger, pullTimeoutMs: 60_000, stallTimeoutMs: 20_000, storeReader: undefined }) };
}

async function failure(p: Promise<unknown>): Promise<WardenError> {
  const err: unknown = await p.then(() => undefined, (e: unknown) => e);
  if (!(err instanceof WardenError)) throw new Error(`expected a WardenError, got ${String(err)}`);
  return err;
}

const signal = (): AbortSignal => AbortSignal.timeout(60_000);
const basicOf = (user: string, password: string): string => `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}`;

/** A registry front that wants `Bearer good-token` (from its /token realm) and records what it forwards. */
async function startGate(upstream: string): Promise<typeof gate> {
  const g = { requests: [] as typeof gate.requests, corruptManifests: false, tokenLogin: undefined, tokenAuth: [] as typeof gate.tokenAuth } as typeof gate;
  g.server = createServer((req, res) => {
    void (async () => {
      const path = req.url ?? "/";
      if (path.startsWith("/token")) {
        const auth = req.headers.authorization;
        g.tokenAuth.push(auth);
        if (g.tokenLogin !== undefined && auth !== g.tokenLogin) {
          res.writeHead(auth === basicOf("mallory", "pw") ? 403 : 401, { "www-authenticate": 'Basic realm="gate"' }).end();
          return;
        }
        const u = new URL(path, "http://x");
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(u.searchParams.get("scope")?.startsWith("repository:") === true ? { token: "good-token" } : {}));
        return;
      }
      g.requests.push({ path, auth: req.headers.authorization, range: req.headers.range });
      if (req.headers.authorization !== "Bearer good-token") {
        res.writeHead(401, { "www-authenticate": `Bearer realm="http://${g.host}/token",service="gate",scope="repository:models/llm:pull"` }).end();
        return;
      }
      const up = await fetch(`http://${upstream}${path}`, { headers: { accept: req.headers.accept ?? "*/*", ...(req.headers.range === undefined ? {} : { range: req.headers.range }) } });
      let body = Buffer.from(await up.arrayBuffer());
      if (g.corruptManifests && path.includes("/manifests/")) body = Buffer.from(body.toString("utf8").replace("schemaVersion", "schemaVersion" + " "));
      const headers: Record<string, string> = {};
      for (const k of ["content-type", "content-range", "docker-content-digest"]) {
        const v = up.headers.get(k);
        if (v !== null) headers[k] = v;
      }
      res.writeHead(up.status, headers).end(body);
    })().catch((err: unknown) => res.destroy(err as Error));
  });
  await new Promise<void>((r) => g.server.listen(0, "127.0.0.1", r));
  g.host = `127.0.0.1:${String((g.server.address() as AddressInfo).port)}`;
  return g;
}

beforeAll(async () => {
  dir = await tempDir("warden-oci");
  registry = await startRegistry(dir);
  gate = await startGate(registry.host);
  files = await startArtifactServer();
  modelImage = await pushImage(join(dir, "layout-model"), registry.host, "models/llm", "v1", [bytesOf(400_000, 7)]);
  const lower = tarOf([{ name: "lib/", type: "5" }, { name: "lib/old.py", body: "old" }, { name: "README", body: "r" }]);
  const upper = tarOf([{ name: "lib/.wh.old.py" }, { name: "run.sh", body: "#!/bin/sh\necho backend\n", mode: 0o755 }, { name: "lib/new.py", body: "new" }]);
  bundleImage = await pushImage(join(dir, "layout-bundle"), registry.host, "backends/echo", "v1", [lower, upper]);
}, 180_000);

afterAll(async () => {
  await new Promise((r) => gate.server.close(r));
  await files.close();
  await registry.stop();
  await rm(dir, { recursive: true, force: true });
});

describe("OCI registry client", () => {
  it("resolves a manifest by tag and by digest; the bytes match the pushed digest", async () => {
    const c = new OciRegistryClient({ protocol: "http:", host: registry.host, repository: "models/llm" });
    const byTag = await c.manifest("v1", signal());
    expect(byTag.sha256).toBe(modelImage.manifest);
    expect(byTag.layers.map((l) => [l.sha256, l.sizeBytes])).toEqual(modelImage.layers.map((l) => [l.sha256, l.size]));
    expect((await c.manifest(`sha256:${modelImage.manifest}`, signal())).layers).toEqual(byTag.layers);
  });

  it("pulls a blob named by an image into the cache, verified; through a token-demanding registry, resuming a partial with Range", async () => {
    const layer = modelImage.layers[0];
    if (layer === undefined) throw new Error("no layer");
    const { cache: c, modelsPath } = cache();
    const spec: ArtifactSpec = { source: `oci+http://${gate.host}/models/llm:v1`, sha256: layer.sha256, sizeBytes: layer.size, path: "llm.gguf" };
    const { partial } = cachePaths(modelsPath, layer.sha256);
    await mkdir(join(modelsPath, ".warden-cache", "partial"), { recursive: true });
    await writeFile(partial, layer.bytes.subarray(0, 150_000));
    const path = await c.ensure(spec, signal(), () => {});
    expect((await readFile(path)).equals(layer.bytes)).toBe(true);
    const blobReqs = gate.requests.filter((r) => r.path.includes("/blobs/") && r.auth !== undefined);
    expect(blobReqs.map((r) => r.range)).toEqual(["bytes=150000-"]);
    // the first request of each kind met the challenge, the retry carried the token
    expect(gate.requests[0]?.auth).toBeUndefined();
    expect(gate.requests.filter((r) => r.auth !== undefined).every((r) => r.auth === "Bearer good-token")).toBe(true);
  });

  it("a token realm that wants the registry's login gets it with HTTP Basic; none, a wrong one, a forbidden user: typed errors naming the registry", async () => {
    gate.tokenLogin = basicOf("alice", "pw:1");
    gate.tokenAuth = [];
    const ref = { protocol: "http:" as const, host: gate.host, repository: "models/llm" };
    try {
      const cases: [{ username: string; password: string } | undefined, Code, string][] = [
        [undefined, Code.Unauthenticated, `the registry ${gate.host} asks for credentials (its token endpoint answered HTTP 401) and registryAuthFile holds none for ${gate.host}`],
        [{ username: "alice", password: "bad" }, Code.Unauthenticated, `the registry ${gate.host} refused the credentials registryAuthFile holds for ${gate.host} (user "alice"; its token endpoint answered HTTP 401)`],
        [{ username: "mallory", password: "pw" }, Code.PermissionDenied, `the registry ${gate.host} denies the user "mallory" access to models/llm (its token endpoint answered HTTP 403)`],
      ];
      for (const [login, code, why] of cases) {
        const e = await failure(new OciRegistryClient(ref, login).manifest("v1", signal()));
        expect([e.code, e.rawMessage]).toEqual([code, why]);
      }
      const m = await new OciRegistryClient(ref, { username: "alice", password: "pw:1" }).manifest("v1", signal());
      expect(m.sha256).toBe(modelImage.manifest);
      expect(gate.tokenAuth).toEqual([undefined, basicOf("alice", "bad"), basicOf("mallory", "pw"), basicOf("alice", "pw:1")]);
      // the login went to the realm only; the registry got the token
      expect(gate.requests.at(-1)?.auth).toBe("Bearer good-token");
    } finally {
      gate.tokenLogin = undefined;
    }
  });

  it("each failure is a typed error naming what is wrong", async () => {
    const layer = modelImage.layers[0];
    if (layer === undefined) throw new Error("no layer");
    const { cache: c, modelsPath } = cache();
    const base = { sha256: layer.sha256, sizeBytes: layer.size, path: "llm.gguf" };
    const cases: [ArtifactSpec, Code, string][] = [
      [{ ...base, source: `oci+http://${registry.host}/models/llm:nosuchtag` }, Code.NotFound, 'has no manifest "nosuchtag" (HTTP 404: unknown tag or digest)'],
      [{ ...base, source: `oci+http://${registry.host}/models/llm@sha256:${"0".repeat(64)}` }, Code.NotFound, `has no manifest "sha256:${"0".repeat(64)}"`],
      [{ ...base, source: `oci+http://${registry.host}/models/llm:v1`, sha256: "1".repeat(64) }, Code.NotFound, `lists no blob sha256:${"1".repeat(64)}`],
      [{ ...base, source: `oci+http://${registry.host}/models/llm`, sha256: "2".repeat(64) }, Code.NotFound, `has no blob sha256:${"2".repeat(64)}`],
      [{ ...base, source: `oci+http://${registry.host}/models/llm:v1`, sizeBytes: layer.size + 1 }, Code.DataLoss, "the manifest gives the blob"],
    ];
    for (const [spec, code, why] of cases) {
      const e = await failure(c.ensure(spec, signal(), () => {}));
      expect([e.code, e.message], why).toEqual([code, expect.stringContaining(why)]);
      expect(e.message).toContain(`sha256 ${spec.sha256}`);
    }
    // a manifest whose bytes are not the digest it was asked by
    gate.corruptManifests = true;
    try {
      const client = new OciRegistryClient({ protocol: "http:", host: gate.host, repository: "models/llm" });
      const e = await failure(client.manifest(`sha256:${modelImage.manifest}`, signal()));
      expect([e.code, e.message]).toEqual([Code.DataLoss, expect.stringContaining(`asked for as sha256:${modelImage.manifest} hashes to sha256:`)]);
    } finally {
      gate.corruptManifests = false;
    }
    // the registry down, then back: the next pull works
    await registry.stop();
    try {
      const e = await failure(c.ensure({ ...base, source: `oci+http://${registry.host}/models/llm:v1` }, signal(), () => {}));
      expect([e.code, e.message]).toEqual([Code.Unavailable, expect.stringContaining(`cannot reach the registry ${registry.host}: ECONNREFUSED`)]);
    } finally {
      await registry.restart();
    }
    expect(await readFile(await c.ensure({ ...base, source: `oci+http://${registry.host}/models/llm:v1` }, signal(), () => {}))).toEqual(layer.bytes);
    // nothing half-written under a wrong digest
    expect((await readdir(join(modelsPath, ".warden-cache", "sha256"))).sort()).toEqual([layer.sha256]);
  }, 120_000);
});

describe("backend bundles", () => {
  it("installs an image's layers in order (whiteouts applied) into backends/<digest> with run.sh, once; lists and removes it", async () => {
    const { cache: c, modelsPath } = cache();
    const installer = new BundleInstaller({ modelsPath, cache: c, logger: nullLogger });
    const spec = checkBundle("bundle", { source: `oci+http://${registry.host}/backends/echo:v1@sha256:${bundleImage.manifest}` });
    const [a, b] = await Promise.all([installer.ensure(spec, signal()), installer.ensure(spec, signal())]);
    expect(a).toBe(join(modelsPath, ".warden-cache", "backends", bundleImage.manifest));
    expect(b).toBe(a);
    expect((await readdir(a)).sort()).toEqual(["README", "lib", "run.sh"]);
    expect(await readdir(join(a, "lib"))).toEqual(["new.py"]);
    expect((await stat(join(a, "run.sh"))).mode & 0o111).not.toBe(0);
    expect(await installer.list()).toEqual([{ sha256: bundleImage.manifest, dir: a }]);
    expect(await installer.remove(bundleImage.manifest, () => undefined)).toBe(true);
    expect(await installer.list()).toEqual([]);
    expect(await installer.remove(bundleImage.manifest, () => undefined)).toBe(false);
  });

  it("a tarball bundle by digest from an http server", async () => {
    const { cache: c, modelsPath } = cache();
    const tgz = tarOf([{ name: "run.sh", body: "#!/bin/sh\n", mode: 0o644 }, { name: "backend.py", body: "print(1)" }]);
    files.files.set("/b.tgz", tgz);
    const installer = new BundleInstaller({ modelsPath, cache: c, logger: nullLogger });
    const spec = checkBundle("bundle", { source: `${files.url}/b.tgz`, sha256: sha256Hex(tgz), sizeBytes: tgz.length });
    const d = await installer.ensure(spec, signal());
    expect((await readdir(d)).sort()).toEqual(["backend.py", "run.sh"]);
    // made runnable even though the archive said 0644
    expect((await stat(join(d, "run.sh"))).mode & 0o100).toBe(0o100);
  });

  it("an unsafe or incomplete image installs nothing and says why; a wrong digest is not found", async () => {
    const { cache: c, modelsPath } = cache();
    const installer = new BundleInstaller({ modelsPath, cache: c, logger: nullLogger });
    const escaping = await pushImage(join(dir, "layout-evil"), registry.host, "backends/evil", "v1", [tarOf([{ name: "run.sh", body: "x" }, { name: "../../outside.sh", body: "x" }])]);
    const noRun = await pushImage(join(dir, "layout-norun"), registry.host, "backends/norun", "v1", [tarOf([{ name: "backend.py", body: "x" }])]);
    const cases: [string, Code, string][] = [
      [`oci+http://${registry.host}/backends/evil@sha256:${escaping.manifest}`, Code.FailedPrecondition, 'unsafe archive: the entry path "../../outside.sh" has a ".." segment'],
      [`oci+http://${registry.host}/backends/norun@sha256:${noRun.manifest}`, Code.FailedPrecondition, "no regular file run.sh"],
      [`oci+http://${registry.host}/backends/echo@sha256:${sha256Of("other")}`, Code.NotFound, "has no manifest"],
    ];
    for (const [source, code, why] of cases) {
      const e = await failure(installer.ensure(checkBundle("bundle", { source }), signal()));
      expect([e.code, e.message], why).toEqual([code, expect.stringContaining(why)]);
      expect(e.message).toContain(source);
      // what the bundle holds (a start reports SPAWN_FAILED), not where it comes from (an artifact failure)
      expect(e.details.reason, why).toBe(code === Code.FailedPrecondition ? "unsafe-bundle" : undefined);
    }
    expect(await readdir(join(modelsPath, ".warden-cache", "backends")).catch(() => [])).toEqual([]);
    expect(await stat(join(modelsPath, "outside.sh")).catch(() => undefined)).toBeUndefined();
  });

  it("config: an image must be pinned by digest; a tarball needs its digest and size", () => {
    expect(() => checkBundle("catalog.x.bundle", { source: `oci://r.example/backends/x:v1` })).toThrow("catalog.x.bundle.source: an image must be pinned");
    expect(() => checkBundle("catalog.x.bundle", { source: "https://x/b.tgz", sha256: "a".repeat(64) })).toThrow("catalog.x.bundle.sizeBytes");
    expect(() => checkBundle("catalog.x.bundle", { source: `oci://r.example/Bad/x@sha256:${"a".repeat(64)}` })).toThrow("invalid repository");
    expect(checkBundle("b", { source: `oci://r.example:5000/backends/x:v1@sha256:${"a".repeat(64)}` })).toEqual({ source: `oci://r.example:5000/backends/x:v1@sha256:${"a".repeat(64)}`, sha256: "a".repeat(64), sizeBytes: undefined });
  });
});
