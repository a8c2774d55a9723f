/**
 * Fuzzing the coordinator's HTTP listener over real loopback connections:
 * ≥ 10 000 generated malformed requests (bad JSON, wrong types, over-size
 * bodies, content types no route reads, truncated and mismatched multipart
 * uploads, methods and paths no route has, broken framing and headers, odd
 * but legal reads), each written byte for byte to a real coordinator
 * process (auth off, the `npm start` default, so every body reaches its
 * parser; an embedded agent with a loaded model, so there is state to
 * lose). Every malformed request is a 4xx, no answer is a 5xx, every answer
 * carries the security headers, the coordinator logs no server error and
 * keeps serving, and the cluster is as it was.
 *
 * In the heavy project: 10 000 connections on a loaded 2-core machine take a
 * minute or more.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AdminService } from "@warden/proto";
import { createClient, type Client } from "@warden/grpc";
import { simModel } from "./support/coordinator-harness.js";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { fuzzBodyLimitBytes, httpFuzzCase, type HttpFuzzCase } from "./support/http-fuzz.js";
import { testPortRange } from "./support/port-range.js";
import { rawHttp, rawRequestBytes, type RawHttpAnswer } from "./support/raw-http.js";

const casesPerRun = 50;
const runs = 200;
/** Connections at once: enough to overlap parsing with I/O, far below http.maxConnections. */
const inFlight = 10;

let dir = "";
let coord: CoordinatorProcess;
let admin: Client<typeof AdminService>;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "warden-fuzz-http-"));
  coord = await startCoordinatorProcess(join(dir, "coordinator.yaml"), {
    listen: "127.0.0.1:0",
    httpListen: "127.0.0.1:0",
    stateDir: join(dir, "state"),
    embeddedAgent: true,
    agent: { nodeId: "local", ports: { ...testPortRange(), quarantine: "1s" }, readiness: { attempts: 100, interval: "200ms", initialInterval: "20ms" }, grace: "3s", nvidiaSmi: "", catalog: { "backend-sim": { builtin: "backend-sim" } } },
    recoveryWindow: "500ms",
    http: { bodyLimit: `${String(fuzzBodyLimitBytes)}B` },
    models: [simModel("m")],
  });
  admin = createClient(AdminService, coord.address);
  await admin.loadModel({ model: "m" }, { timeoutMs: 60_000 });
}, 120_000);

afterAll(async () => {
  await admin.unloadModel({ model: "m" }, { timeoutMs: 60_000 }).catch(() => undefined);
  await coord.kill();
  await rm(dir, { recursive: true, force: true });
});

/** Everything a burst could change, as the Admin API shows it (times and counters left out). */
async function clusterState(): Promise<unknown> {
  const nodes = (await admin.listNodes({})).nodes.map((n) => ({ id: n.nodeId, state: n.state, draining: n.draining, backends: n.backends }));
  const models = (await admin.listModels({})).instances.map((i) => ({ model: i.model, node: i.nodeId, state: i.state, incarnation: i.incarnation, inFlight: i.inFlight }));
  return { nodes, models, policy: await admin.getPolicy({}) };
}

function show(c: HttpFuzzCase, address: string): string {
  const bytes = rawRequestBytes(address, c.request);
  return `${c.kind}: ${JSON.stringify(bytes.subarray(0, 400).toString("latin1"))}${bytes.length > 400 ? `… (${String(bytes.length)} bytes)` : ""}`;
}

/** Why `a` is not the answer `c` must get, or undefined. */
function wrongAnswer(c: HttpFuzzCase, a: RawHttpAnswer): string | undefined {
  if (a.status >= 500) return `${String(a.status)} ${a.bodyStart.slice(0, 200)}`;
  if (c.expect === "4xx" && (a.status < 400 || a.status > 499)) return `expected a 4xx, got ${String(a.status)}`;
  // 100 Continue is an interim line, not the answer: nothing to carry.
  if (a.status >= 200 && a.headers["x-content-type-options"] !== "nosniff") return `${String(a.status)} without the security headers: ${JSON.stringify(a.headers)}`;
  return undefined;
}

async function fire(address: string, batch: readonly HttpFuzzCase[]): Promise<RawHttpAnswer[]> {
  const out: RawHttpAnswer[] = new Array<RawHttpAnswer>(batch.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < batch.length) {
      const i = next++;
      const c = batch[i] as HttpFuzzCase;
      // The deadline is a hang detector (far above any answer's time), not a timing assertion.
      out[i] = await rawHttp(address, c.request, { deadlineMs: 120_000 }).catch((err: unknown) => {
        throw new Error(`${show(c, address)} → no answer: ${String(err)}`);
      });
    }
  };
  await Promise.all(Array.from({ length: inFlight }, worker));
  return out;
}

describe("hostile bursts at the coordinator's HTTP listener", () => {
  it("≥ 10 000 malformed requests: each a 4xx (reads below 500), security headers on all, no server error, state unchanged", { timeout: 900_000 }, async () => {
    const address = coord.httpAddress ?? "";
    const before = await clusterState();
    const byStatus: Record<string, number> = {};
    const byKind: Record<string, number> = {};
    let cases = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(httpFuzzCase(), { minLength: casesPerRun, maxLength: casesPerRun }), async (batch) => {
        const answers = await fire(address, batch);
        batch.forEach((c, i) => {
          const a = answers[i] as RawHttpAnswer;
          const why = wrongAnswer(c, a);
          if (why !== undefined) throw new Error(`${show(c, address)} → ${why}`);
          byStatus[String(a.status)] = (byStatus[String(a.status)] ?? 0) + 1;
          byKind[c.kind] = (byKind[c.kind] ?? 0) + 1;
        });
        cases += batch.length;
      }),
      { numRuns: runs, endOnFailure: true },
    ).catch((err: unknown) => {
      // The failing request alone (show()), not fast-check's print of the whole batch of 50.
      throw (err as { cause?: unknown }).cause instanceof Error ? (err as { cause: Error }).cause : err;
    });
    process.stdout.write(`http fuzz: ${String(cases)} cases; by kind ${JSON.stringify(byKind)}; by status ${JSON.stringify(byStatus)}\n`);
    expect(cases).toBeGreaterThanOrEqual(10_000);
    // Every kind was exercised, and no kind only by its easy refusals.
    expect(Object.keys(byKind).sort()).toEqual(["bad-json", "content-type", "header", "method", "multipart", "over-size", "path", "read", "wrong-type"]);
    expect(coord.logLines.filter((l) => l["msg"] === "http call failed")).toEqual([]);
    // Streams opened by the burst end with their connections.
    await expect.poll(async () => await clusterState(), { timeout: 30_000 }).toEqual(before);
    // Still serving: the API answers and a routed call works.
    expect((await rawHttp(address, { method: "GET", path: "/v1/models" })).status).toBe(200);
    const chat = await fetch(`http://${address}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "after" }] }) });
    expect(chat.status).toBe(200);
  });
});
