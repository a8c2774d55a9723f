/**
 * Backend bundles fetched from peers, between real processes: Debian's
 * `docker-registry` with two images pushed by `skopeo` (two layers each),
 * behind a counting HTTP proxy (every blob GET the agents send is seen), a
 * real coordinator and two real agents naming both images in their catalogs.
 * Agent A installs both from the registry. Agent B installs the first reading
 * its layers from A (NodeService.FindPeers names A, with a ticket): the
 * registry serves B the manifest and no blob. Then A is killed while the
 * coordinator still counts it ready: B's install of the second image is
 * named the dead A, fails over to the registry, and installs.
 */
import { randomBytes } from "node:crypto";
import { createServer, request, type Server } from "node:http";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, AgentService, NodeState } from "@warden/proto";
import { simModel, until } from "./support/coordinator-harness.js";
import { simCatalog, uniqueTag } from "./support/agent-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { freePort } from "./support/free-port.js";
import { pushImage, startRegistry, tarOf, type BuiltImage, type Registry } from "./support/oci-registry.js";

let dir = "";
let registry: Registry;
let proxy: Server;
let proxyHost = "";
/** Blob GETs through the proxy, by digest. */
const blobGets = new Map<string, number>();
let coord: CoordinatorProcess | undefined;
const agents = new Map<string, RemoteAgent>();
let admin: Client<typeof AdminService>;
let first: BuiltImage;
let second: BuiltImage;

/** A LocalAI-style image: run.sh in the first layer, incompressible payload in both (so each layer is a real pull). */
function layers(name: string): Buffer[] {
  return [
    tarOf([{ name: "run.sh", body: `#!/bin/sh\n# ${name}\nexit 0\n`, mode: 0o755 }, { name: "lib-a.bin", body: randomBytes(1_500_000) }]),
    tarOf([{ name: "lib-b.bin", body: randomBytes(1_000_000) }]),
  ];
}

/** Forwards everything to the registry, counting each blob GET (manifests are not blobs). */
async function countingProxy(target: string): Promise<Server> {
  const [host, port] = target.split(":");
  const server = createServer((req, res) => {
    const blob = /\/blobs\/sha256:([0-9a-f]{64})$/.exec(req.url ?? "");
    if (req.method === "GET" && blob?.[1] !== undefined) blobGets.set(blob[1], (blobGets.get(blob[1]) ?? 0) + 1);
    const up = request({ host, port: Number(port), path: req.url, method: req.method, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode ?? 502, r.headers);
      r.pipe(res);
    });
    up.on("error", () => res.destroy());
    req.pipe(up);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const a = server.address();
  if (a === null || typeof a === "string") throw new Error("no proxy address");
  proxyHost = `127.0.0.1:${String(a.port)}`;
  return server;
}

const gets = (image: BuiltImage): number[] => image.layers.map((l) => blobGets.get(l.sha256) ?? 0);
const logged = (a: RemoteAgent, msg: string, sha256: string): Record<string, unknown>[] =>
  a.proc.lines.flatMap((l) => {
    try {
      const o = JSON.parse(l) as Record<string, unknown>;
      return o.msg === msg && o.sha256 === sha256 ? [o] : [];
    } catch {
      return [];
    }
  });

async function install(nodeId: string, backend: string): Promise<void> {
  const a = agents.get(nodeId);
  if (a === undefined) throw new Error(`no agent ${nodeId}`);
  const c = createClient(AgentService, a.address);
  try {
    expect(await c.installBundle({ backend }, { timeoutMs: 120_000 })).toMatchObject({ alreadyInstalled: false, bundle: { installed: true } });
  } finally {
    c.close();
  }
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-bundle-peers-"));
  registry = await startRegistry(dir);
  first = await pushImage(join(dir, "layout-1"), registry.host, "localai/peer-one", "v1", layers("one"));
  second = await pushImage(join(dir, "layout-2"), registry.host, "localai/peer-two", "v1", layers("two"));
  proxy = await countingProxy(registry.host);
  // "probe" and "probe-two" are never loaded: their ExplainPlacement says whether a node's heartbeats list each image's layers.
  const probeOf = (name: string, image: BuiltImage) => ({ ...simModel(name), modelFile: "layer-0", artifacts: image.layers.map((l, i) => ({ source: `http://127.0.0.1:9/layer-${String(i)}`, sha256: l.sha256, sizeBytes: l.size, path: `layer-${String(i)}` })) });
  const probe = probeOf("probe", first);
  const probeTwo = probeOf("probe-two", second);
  coord = await startCoordinatorProcess(join(dir, "coord.yaml"), {
    listen: `127.0.0.1:${String(await freePort())}`,
    httpListen: "127.0.0.1:0",
    stateDir: join(dir, "coord-state"),
    embeddedAgent: false,
    recoveryWindow: "200ms",
    // A killed agent stays "ready" for a minute: the coordinator goes on naming it as a peer.
    nodeGrace: "60s",
    models: [probe, probeTwo],
  });
  const tag = uniqueTag("bundle-peers");
  const catalog = { one: { bundle: { source: `oci+http://${proxyHost}/localai/peer-one:v1@sha256:${first.manifest}` } }, two: { bundle: { source: `oci+http://${proxyHost}/localai/peer-two:v1@sha256:${second.manifest}` } } };
  for (const nodeId of ["bundle-peer-a", "bundle-peer-b"]) {
    const modelsPath = join(dir, nodeId, "models");
    await mkdir(modelsPath, { recursive: true });
    const a = await startRemoteAgent({ coordinator: coord.address, nodeId, tag, config: { modelsPath, catalog: { "backend-sim": simCatalog(`${tag}-${nodeId}`), ...catalog } } });
    agents.set(nodeId, a);
  }
  admin = createClient(AdminService, coord.address);
  await until("both nodes ready", async () => (await admin.listNodes({})).nodes.filter((n) => n.state === NodeState.READY).length === 2, 60_000);
}, 240_000);

afterAll(async () => {
  admin.close();
  for (const a of agents.values()) await a.cleanup();
  await coord?.kill();
  await new Promise((r) => proxy.close(r));
  await registry.stop();
  await rm(dir, { recursive: true, force: true });
}, 60_000);

describe("backend bundles from peers", { timeout: 240_000 }, () => {
  it("a second node installs a bundle reading its layers from the node that holds them: the registry sends it no blob", async () => {
    await install("bundle-peer-a", "one");
    await install("bundle-peer-a", "two");
    expect(gets(first)).toEqual([1, 1]);
    expect(gets(second)).toEqual([1, 1]);
    // A's heartbeats list both images' layers: what the coordinator finds holders by (the next test
    // kills A at once and needs the coordinator to name it for the second image).
    for (const model of ["probe", "probe-two"]) {
      let reason = "";
      await until(`bundle-peer-a reported the layers of ${model}`, async () => {
        reason = (await admin.explainPlacement({ model })).nodes.find((n) => n.nodeId === "bundle-peer-a")?.reason ?? "";
        return reason.endsWith("; cached)");
      }, 20_000).catch((e: unknown) => { throw new Error(`${String(e)}: ${reason}`); });
    }
    await install("bundle-peer-b", "one");
    expect(gets(first)).toEqual([1, 1]);
    const b = agents.get("bundle-peer-b") as RemoteAgent;
    for (const l of first.layers) expect(logged(b, "artifact fetched from a peer", l.sha256).map((o) => o.from)).toEqual(["peer bundle-peer-a"]);
  });

  it("with the holder gone, the install falls back to the registry and succeeds", async () => {
    await agents.get("bundle-peer-a")?.kill();
    // The coordinator still counts A ready (nodeGrace 60 s), so FindPeers names it for B's layers.
    expect((await admin.listNodes({})).nodes.find((n) => n.nodeId === "bundle-peer-a")?.state).toBe(NodeState.READY);
    await install("bundle-peer-b", "two");
    expect(gets(second)).toEqual([2, 2]);
    const b = agents.get("bundle-peer-b") as RemoteAgent;
    for (const l of second.layers) {
      expect(logged(b, "peer fetch failed; trying the next source", l.sha256).map((o) => o.from)).toEqual(["peer bundle-peer-a"]);
      expect(logged(b, "artifact fetched from a peer", l.sha256)).toEqual([]);
    }
  });
});
