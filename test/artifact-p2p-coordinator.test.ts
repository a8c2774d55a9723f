/**
 * Peer sources granted by a real coordinator: two remote agents (real
 * processes) registered with their peer keys, a model pinned to each by a
 * selector, one artifact from a real HTTP origin. The first load pulls from
 * the origin; once the holder's heartbeat lists the digest, the load on the
 * other node is sent with the holder as its peer and a ticket, and the origin
 * serves the file once in all.
 */
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, NodeState } from "@warden/proto";
import { simModel, until } from "./support/coordinator-harness.js";
import { uniqueTag } from "./support/agent-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { startRemoteAgent, type RemoteAgent } from "./support/agent-process.js";
import { bytesOf, sha256Hex, startArtifactServer, type ArtifactServer } from "./support/artifact-server.js";
import { freePort } from "./support/free-port.js";

const fileBytes = 3_000_000;
let dir = "";
let origin: ArtifactServer;
let coord: CoordinatorProcess | undefined;
const agents: RemoteAgent[] = [];
let admin: Client<typeof AdminService>;
let sha = "";

function pinned(id: string, zone: string): Record<string, unknown> {
  return { ...simModel(id, { knobs: { model_file_sha256: sha }, selector: { zone } }), modelFile: "weights.bin", artifacts: [{ source: `${origin.url}/weights.bin`, sha256: sha, sizeBytes: fileBytes, path: "weights.bin" }] };
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-artifact-p2p-coord-"));
  origin = await startArtifactServer();
  const body = bytesOf(fileBytes, 31);
  sha = sha256Hex(body);
  origin.files.set("/weights.bin", body);
  coord = await startCoordinatorProcess(join(dir, "coord.yaml"), {
    listen: `127.0.0.1:${String(await freePort())}`,
    httpListen: "127.0.0.1:0",
    stateDir: join(dir, "coord-state"),
    embeddedAgent: false,
    recoveryWindow: "200ms",
    // "either" is never loaded: its ExplainPlacement says whether a node holds the file.
    models: [pinned("on-a", "a"), pinned("on-b", "b"), { ...pinned("either", "a"), selector: {} }],
  });
  const tag = uniqueTag("artifact-p2p-coord");
  for (const [nodeId, zone] of [["p2p-node-a", "a"], ["p2p-node-b", "b"]] as const) {
    const modelsPath = join(dir, nodeId, "models");
    await mkdir(modelsPath, { recursive: true });
    agents.push(await startRemoteAgent({ coordinator: coord.address, nodeId, tag, labels: { zone }, config: { modelsPath } }));
  }
  admin = createClient(AdminService, coord.address);
  await until("both nodes ready", async () => (await admin.listNodes({})).nodes.filter((n) => n.state === NodeState.READY).length === 2, 60_000);
}, 180_000);

afterAll(async () => {
  admin.close();
  for (const a of agents) await a.cleanup();
  await coord?.kill();
  await origin.close();
  await rm(dir, { recursive: true, force: true });
}, 60_000);

describe("the coordinator grants peer sources", { timeout: 240_000 }, () => {
  it("a load on a second node fetches the artifact from the node that holds it: the origin serves one copy", async () => {
    await until("on-a placeable", async () => (await admin.explainPlacement({ model: "on-a" })).nodes.find((n) => n.nodeId === "p2p-node-a")?.reason.includes("pull") === true, 60_000);
    expect((await admin.loadModel({ model: "on-a" }, { timeoutMs: 120_000 })).instance?.nodeId).toBe("p2p-node-a");
    // The holder's heartbeat lists the digest: what the coordinator finds holders by.
    await until("p2p-node-a reported the digest", async () => (await admin.explainPlacement({ model: "either" })).nodes.find((n) => n.nodeId === "p2p-node-a")?.reason.endsWith("; cached)") === true, 60_000);
    const sent = origin.bytesSent;
    expect((await admin.loadModel({ model: "on-b" }, { timeoutMs: 120_000 })).instance?.nodeId).toBe("p2p-node-b");
    expect(origin.requestsFor("/weights.bin")).toHaveLength(1);
    expect(origin.bytesSent - sent).toBe(0);
  });
});
