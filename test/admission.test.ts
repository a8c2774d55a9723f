/**
 * Priority classes and fair sharing on a real coordinator with a real
 * backend-sim process: a model with `admission:` (one call in flight per
 * replica) is held by one long call; what arrives meanwhile waits by class
 * and is shared round robin between tokens, a caller past its share and a
 * sheddable call past the threshold are refused at once (gRPC
 * RESOURCE_EXHAUSTED, HTTP 429 with Retry-After), a token cannot raise its
 * class — asked through gRPC metadata, the HTTP `X-Warden-Priority` header
 * or the data-plane listener alike. Nothing here depends on timing: the holder is released by
 * cancelling it, and each step waits for the gate's own metrics.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, WardenError } from "@warden/common";
import { createClient, type Client } from "@warden/grpc";
import { InferenceService } from "@warden/proto";
import { simModel, startTestCoordinator, until, type TestCoordinator } from "./support/coordinator-harness.js";
import { withToken, writeTokensFile } from "./support/auth-tokens.js";

type Who = "a" | "b" | "crit";

describe("admission: classes, fair sharing and shedding", () => {
  let tc: TestCoordinator;
  let dir: string;
  let tokens: Record<Who | "admin", string>;
  const clients = new Map<string, Client<typeof InferenceService>>();

  const client = (who: Who, priority?: string): Client<typeof InferenceService> => {
    const key = `${who}/${priority ?? ""}`;
    let c = clients.get(key);
    if (c === undefined) {
      const auth = withToken(tokens[who]).headers ?? {};
      c = createClient(InferenceService, tc.c.address, { headers: priority === undefined ? auth : { ...auth, "warden-priority": priority } });
      clients.set(key, c);
    }
    return c;
  };

  /** One metric's value for the model (summed over the other labels). */
  const metric = async (name: string, labels: Record<string, string> = {}): Promise<number> => {
    const m = (await tc.c.metricsRegistry.getMetricsAsJSON()).find((x) => x.name === name);
    let sum = 0;
    for (const v of m?.values ?? []) if (v.labels["model"] === "m" && Object.entries(labels).every(([k, want]) => v.labels[k] === want)) sum += v.value;
    return sum;
  };

  const predict = (who: Who, tokensOut: number, o: { priority?: string; signal?: AbortSignal } = {}): Promise<string> =>
    client(who, o.priority)
      .predict({ model: "m", options: { Prompt: who, Tokens: tokensOut } }, { timeoutMs: 120_000, ...(o.signal === undefined ? {} : { signal: o.signal }) })
      .then(() => who);

  const codeOf = async (p: Promise<unknown>): Promise<{ code: Code; message: string }> => {
    try {
      await p;
      return { code: Code.Ok, message: "" };
    } catch (err) {
      const e = WardenError.from(err);
      return { code: e.code, message: e.rawMessage };
    }
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "warden-admission-"));
    const t = await writeTokensFile(dir, { a: { role: "inference" }, b: { role: "inference" }, crit: { role: "inference", priority: "critical" }, admin: { role: "admin" } });
    tokens = t.tokens;
    tc = await startTestCoordinator({
      // Each token of a reply costs 50 ms: the holder asks for 2 400 (two minutes, cancelled long before), the others for 1.
      models: [{ ...simModel("m", { knobs: { token_delay_ms: 50 } }), replicas: { targetInFlight: 1 }, admission: { maxInFlightPerReplica: 1, maxQueued: 6, shedAtQueued: 1, maxQueuedPerPrincipal: 2, retryAfter: "2s" } }],
      extra: { auth: { tokensFile: t.path }, httpListen: "127.0.0.1:0", inferenceListen: "127.0.0.1:0" },
    });
    const admin = createClient(await import("@warden/proto").then((p) => p.AdminService), tc.c.address, withToken(tokens.admin));
    await admin.loadModel({ model: "m" }, { timeoutMs: 60_000 });
  }, 90_000);

  afterAll(async () => {
    await tc.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("serves waiting calls critical first, then round robin between tokens; refuses past a caller's share and sheddable past the threshold", async () => {
    const holder = new AbortController();
    const held = codeOf(predict("a", 2400, { signal: holder.signal }));
    await until("the holder is in flight", async () => (await metric("warden_admission_in_flight")) === 1);

    // Arrivals in a known order: each waits until the previous one is queued.
    const done: string[] = [];
    const waiting: Promise<void>[] = [];
    const arrive = async (who: Who, label: string): Promise<void> => {
      const before = await metric("warden_admission_waiting");
      waiting.push(predict(who, 1).then(() => void done.push(label)));
      await until(`${label} waits`, async () => (await metric("warden_admission_waiting")) === before + 1);
    };
    await arrive("a", "a2");
    await arrive("a", "a3");
    await arrive("b", "b1");
    await arrive("crit", "c1");
    expect(await metric("warden_admission_waiting", { class: "critical" })).toBe(1);
    expect(await metric("warden_admission_waiting", { class: "standard" })).toBe(3);

    // a already has 2 waiting (its share): refused at once, not queued.
    const overShare = await codeOf(predict("a", 1));
    expect(overShare.code).toBe(Code.ResourceExhausted);
    expect(overShare.message).toMatch(/model "m" is saturated: this caller already has 2 calls waiting for this model; retry after 2s/);
    // 4 wait, sheddable calls are refused from 1.
    const shed = await codeOf(predict("b", 1, { priority: "sheddable" }));
    expect(shed.code).toBe(Code.ResourceExhausted);
    expect(shed.message).toMatch(/sheddable calls are refused from 1/);
    // A standard token cannot raise its class.
    const raised = await codeOf(predict("b", 1, { priority: "critical" }));
    expect(raised.code).toBe(Code.PermissionDenied);
    expect(raised.message).toMatch(/warden-priority: this token may ask for standard or lower, not critical/);
    // The same refusal over HTTP: 429, Retry-After, OpenAI's error shape.
    const http = await fetch(`http://${tc.c.httpAddress ?? ""}/v1/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${tokens.a}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "m", prompt: "over", max_tokens: 1 }),
    });
    expect(http.status).toBe(429);
    expect(http.headers.get("retry-after")).toBe("2");
    const body = (await http.json()) as { error: { type: string; code: string | null; message: string } };
    expect(body.error.code).toBe("rate_limit_exceeded");
    expect(body.error.message).toMatch(/this caller already has 2 calls waiting/);
    expect(await metric("warden_admission_refused_total")).toBe(3);
    expect(await metric("warden_admission_waiting")).toBe(4);

    holder.abort();
    expect((await held).code).toBe(Code.Canceled);
    await Promise.all(waiting);
    expect(done).toEqual(["c1", "a2", "b1", "a3"]);
    await until("the gate is empty", async () => (await metric("warden_admission_in_flight")) === 0 && (await metric("warden_admission_waiting")) === 0);
  }, 120_000);

  it("a class asked with the HTTP X-Warden-Priority header and with warden-priority on the data-plane listener is the class the call waits at; asking above the token's is refused", async () => {
    const holder = new AbortController();
    const held = codeOf(predict("a", 2400, { signal: holder.signal }));
    await until("the holder is in flight", async () => (await metric("warden_admission_in_flight")) === 1);
    const chat = (who: Who, priority: string): Promise<Response> =>
      fetch(`http://${tc.c.httpAddress ?? ""}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${tokens[who]}`, "content-type": "application/json", "x-warden-priority": priority },
        body: JSON.stringify({ model: "m", messages: [{ role: "user", content: who }], max_tokens: 1 }),
      });
    const done: string[] = [];
    // The critical token lowers itself over HTTP: it waits as sheddable, not critical.
    const httpCall = chat("crit", "sheddable").then((r) => void done.push(`http ${String(r.status)}`));
    await until("the HTTP call waits as sheddable", async () => (await metric("warden_admission_waiting", { class: "sheddable" })) === 1);
    expect(await metric("warden_admission_waiting", { class: "critical" })).toBe(0);
    // The same token on the data-plane listener asks for standard through gRPC metadata.
    const plane = createClient(InferenceService, tc.c.inferenceAddress ?? "none", { headers: { ...(withToken(tokens.crit).headers ?? {}), "warden-priority": "standard" } });
    const planeB = createClient(InferenceService, tc.c.inferenceAddress ?? "none", { headers: { ...(withToken(tokens.b).headers ?? {}), "warden-priority": "critical" } });
    try {
      const planeCall = plane.predict({ model: "m", options: { Prompt: "plane", Tokens: 1 } }, { timeoutMs: 120_000 }).then(() => void done.push("plane"));
      await until("the data-plane call waits as standard", async () => (await metric("warden_admission_waiting", { class: "standard" })) === 1);
      expect(await metric("warden_admission_waiting", { class: "critical" })).toBe(0);

      // A standard token asking for critical: 403 over HTTP, PERMISSION_DENIED on the data plane; an unknown word is 400.
      const raised = await chat("b", "critical");
      expect(raised.status).toBe(403);
      expect(((await raised.json()) as { error: { message: string } }).error.message).toMatch(/x-warden-priority: this token may ask for standard or lower, not critical/);
      const unknown = await chat("b", "urgent");
      expect(unknown.status).toBe(400);
      expect(((await unknown.json()) as { error: { message: string } }).error.message).toMatch(/x-warden-priority: must be one of critical, standard, sheddable/);
      const planeRaised = await codeOf(planeB.predict({ model: "m", options: { Prompt: "b", Tokens: 1 } }, { timeoutMs: 60_000 }));
      expect(planeRaised.code).toBe(Code.PermissionDenied);
      expect(planeRaised.message).toMatch(/warden-priority: this token may ask for standard or lower, not critical/);
      expect(await metric("warden_admission_waiting")).toBe(2);

      // One place: the standard call (data plane) is served before the sheddable one (HTTP).
      holder.abort();
      expect((await held).code).toBe(Code.Canceled);
      await Promise.all([httpCall, planeCall]);
      expect(done).toEqual(["plane", "http 200"]);
    } finally {
      plane.close();
      planeB.close();
    }
    await until("the gate is empty", async () => (await metric("warden_admission_in_flight")) === 0 && (await metric("warden_admission_waiting")) === 0);
  }, 120_000);

  it("a waiting call that gives up leaves the queue at once; its place is not held", async () => {
    const holder = new AbortController();
    const held = codeOf(predict("a", 2400, { signal: holder.signal }));
    await until("the holder is in flight", async () => (await metric("warden_admission_in_flight")) === 1);
    const quitter = new AbortController();
    const quit = codeOf(predict("b", 1, { signal: quitter.signal }));
    await until("b waits", async () => (await metric("warden_admission_waiting")) === 1);
    quitter.abort();
    expect((await quit).code).toBe(Code.Canceled);
    await until("b left the queue", async () => (await metric("warden_admission_waiting")) === 0);
    // Its place is not held: the next caller goes first once the holder ends.
    const next = predict("crit", 1);
    await until("crit waits", async () => (await metric("warden_admission_waiting")) === 1);
    holder.abort();
    expect((await held).code).toBe(Code.Canceled);
    expect(await next).toBe("crit");
  }, 120_000);

  it("under a flood with short deadlines nothing leaks: every place is given back, nothing stays queued", async () => {
    // 120 calls at once, each with a 300 ms deadline, against one place: most time out waiting or in flight.
    const outcomes = await Promise.all(
      Array.from({ length: 120 }, (_, i) =>
        codeOf(client(i % 2 === 0 ? "a" : "b").predict({ model: "m", options: { Prompt: "flood", Tokens: 3 } }, { timeoutMs: 300 })),
      ),
    );
    const codes = new Set(outcomes.map((o) => o.code));
    expect([...codes].every((c) => c === Code.Ok || c === Code.DeadlineExceeded || c === Code.ResourceExhausted || c === Code.Canceled)).toBe(true);
    await until("the gate is empty again", async () => (await metric("warden_admission_in_flight")) === 0 && (await metric("warden_admission_waiting")) === 0);
    // And it still admits: a call goes through.
    expect(await predict("crit", 1)).toBe("crit");
  }, 120_000);
});
