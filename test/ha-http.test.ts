/**
 * HTTP follows the HA leader, real processes: a 3-server nats-server
 * JetStream cluster, two `warden coordinator --ha` members with HTTP
 * listeners. A standby's HTTP port answers every request (a 503 naming the
 * leader, a redirect for the dashboard page); the `openai` client pointed at
 * it fails naming the leader; the dashboard in headless Chromium says which
 * member it is on and, after kill -9 of the leader, ends up on the new one.
 * The tests share the members: the second kills its leader and starts a
 * third member, the third pauses the leader until the other one leads.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chromium, type Browser, type Page } from "playwright-core";
import OpenAI from "openai";
import { createClient } from "@warden/grpc";
import { AdminService } from "@warden/proto";
import { uniqueTag } from "./support/agent-harness.js";
import { simModel, until } from "./support/coordinator-harness.js";
import { chromiumPath, domDeadlineMs } from "./support/dashboard-flow.js";
import type { HaCoordinatorProcess } from "./support/ha-coordinator-process.js";
import { startHaFleet, type HaFleet } from "./support/ha-fleet.js";

interface Member {
  readonly proc: HaCoordinatorProcess;
  readonly url: string;
}

let fleet: HaFleet | undefined;
let tag = "";
let browser: Browser | undefined;
const members: Member[] = [];

async function member(i: number, tag: string): Promise<Member> {
  const proc = await fleet!.member({ holder: `${tag}-${String(i)}`, http: true, config: { policy: { tickInterval: "100ms" }, models: [simModel("m")] } });
  return { proc, url: proc.httpUrl! };
}

/** The member whose GetHaStatus says it leads, once the other one (a standby) has seen it announce itself and it lists the standby. */
async function leaderAndStandby(): Promise<{ leader: Member; standby: Member }> {
  const pair = members.filter((m) => m.proc.child.exitCode === null && m.proc.child.signalCode === null);
  return until("one leader, seen by the standby", async () => {
    const st = await Promise.all(
      pair.map(async (m) => {
        const admin = createClient(AdminService, m.proc.address);
        try {
          return await admin.getHaStatus({}, { timeoutMs: 5_000 }).catch(() => undefined);
        } finally {
          admin.close();
        }
      }),
    );
    const li = st.findIndex((s) => s?.self?.role === "leader");
    const leader = pair[li];
    const standby = pair[1 - li];
    const ss = st[1 - li];
    if (li < 0 || leader === undefined || standby === undefined || ss?.self?.role !== "standby") return undefined;
    // The leader lists the standby too: a page opened on the leader learns the member to flee to from it.
    const ls = st[li];
    const leaderSeesStandby = ls?.standbys.some((m) => m.holder === standby.proc.holder) === true;
    return ss.leaderHolder === leader.proc.holder && ss.standbys.some((m) => m.holder === leader.proc.holder && m.role === "leader") && leaderSeesStandby ? { leader, standby } : undefined;
  }, 90_000);
}

beforeAll(async () => {
  fleet = await startHaFleet("ha-http");
  tag = uniqueTag("ha-http").slice(0, 30).replace(/[^A-Za-z0-9_-]/g, "-");
  members.push(...(await Promise.all([member(0, tag), member(1, tag)])));
  browser = await chromium.launch({ executablePath: chromiumPath, headless: true, args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await fleet?.close();
}, 60_000);

describe("HTTP follows the HA leader", { timeout: 240_000 }, () => {
  it("a standby's HTTP port: 503 + Retry-After + the leader's URL for API calls, 307 to the leader's dashboard, /ha/leader 200 only on the leader; the openai client names the leader", async () => {
    const { leader, standby } = await leaderAndStandby();

    const models = await fetch(`${standby.url}/v1/models`);
    expect(models.status).toBe(503);
    expect(models.headers.get("retry-after")).toBe("1");
    expect(models.headers.get("warden-leader")).toBe(leader.url);
    const body = (await models.json()) as { error: { message: string; type: string; code: string } };
    expect(body.error).toMatchObject({ type: "server_error", code: null });
    expect(body.error.message).toContain(leader.url);

    // A chat call with a body, and a dashboard action: the same refusal, each in its API's error shape.
    const chat = await fetch(`${standby.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] }) });
    expect(chat.status).toBe(503);
    expect(chat.headers.get("warden-leader")).toBe(leader.url);
    const act = await fetch(`${standby.url}/api/dashboard/actions/unload`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m" }) });
    expect(act.status).toBe(503);
    expect(await act.json()).toMatchObject({ error: { code: "unavailable" } });

    const page = await fetch(`${standby.url}/`, { redirect: "manual" });
    expect(page.status).toBe(307);
    expect(page.headers.get("location")).toBe(`${leader.url}/`);

    expect((await fetch(`${leader.url}/ha/leader`)).status).toBe(200);
    const ready = await fetch(`${standby.url}/ha/leader`);
    expect(ready.status).toBe(503);
    expect(ready.headers.get("warden-leader")).toBe(leader.url);
    expect((await fetch(`${leader.url}/v1/models`)).status).toBe(200);

    // The OpenAI SDK: no retries, so the error is the standby's, naming the leader.
    const client = new OpenAI({ apiKey: "unused", baseURL: `${standby.url}/v1`, maxRetries: 0 });
    const err = await client.models.list().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(503);
    expect((err as Error).message).toContain(`the leader's HTTP API is at ${leader.url}`);
    // Through the leader, the same client works.
    const listed = await new OpenAI({ apiKey: "unused", baseURL: `${leader.url}/v1`, maxRetries: 0 }).models.list();
    expect(listed.data.map((m) => m.id)).toEqual(["m"]);
  });

  it("the dashboard says which member it is on and, after kill -9 of the leader, ends up on the new leader (opened on either member)", async () => {
    const { leader, standby } = await leaderAndStandby();
    const haBadge = async (p: Page): Promise<{ holder: string | null; role: string | null }> => ({ holder: await p.getAttribute("#ha", "data-holder"), role: await p.getAttribute("#ha", "data-role") });
    const b = browser!;
    const onLeader = await b.newPage();
    await onLeader.goto(leader.url);
    await onLeader.waitForSelector(`#ha[data-holder="${leader.proc.holder}"][data-role="leader"]`, { timeout: domDeadlineMs });
    await onLeader.waitForSelector('#conn[data-state="live"]', { timeout: domDeadlineMs });
    expect(await onLeader.textContent("#ha")).toBe(`on ${leader.proc.holder} (leader)`);
    // Opened on the standby: redirected to the leader.
    const onStandby = await b.newPage();
    await onStandby.goto(standby.url);
    await onStandby.waitForSelector(`#ha[data-holder="${leader.proc.holder}"]`, { timeout: domDeadlineMs });
    expect(new URL(onStandby.url()).origin).toBe(leader.url);

    await leader.proc.kill();
    for (const p of [onLeader, onStandby]) {
      await p.waitForSelector(`#ha[data-holder="${standby.proc.holder}"][data-role="leader"]`, { timeout: 120_000 }).catch(async (err: unknown) => {
        // Which side failed: the takeover (the standby's own log) or the page (what it shows).
        const takeover = standby.proc.lines.filter((l) => /takeover|leading|not competing|listener/.test(String(l["msg"]))).slice(-5);
        throw new Error(`${String(err)}; page at ${p.url()} shows "${(await p.textContent("#conn").catch(() => "")) ?? ""}" / "${(await p.textContent("#ha").catch(() => "")) ?? ""}"; standby log: ${JSON.stringify(takeover)}`);
      });
      await p.waitForSelector('#conn[data-state="live"]', { timeout: domDeadlineMs });
      expect(new URL(p.url()).origin).toBe(standby.url);
      expect(await haBadge(p)).toEqual({ holder: standby.proc.holder, role: "leader" });
      // The new leader's own data: its snapshot, as its Admin API lists it.
      await p.waitForSelector("#nodes[data-at]", { timeout: domDeadlineMs });
    }
    const admin = createClient(AdminService, standby.proc.address);
    try {
      const s = await admin.getHaStatus({}, { timeoutMs: 10_000 });
      expect(s.self?.role).toBe("leader");
      expect(s.leaderHolder).toBe(standby.proc.holder);
    } finally {
      admin.close();
    }
    expect((await fetch(`${standby.url}/ha/leader`)).status).toBe(200);
    await onLeader.close();
    await onStandby.close();
    // A new standby for the next test.
    members.push(await member(2, tag));
  });

  it("a leader paused until the other member leads, then resumed: its page follows the member's own word that it no longer leads", async () => {
    const { leader, standby } = await leaderAndStandby();
    const page = await browser!.newPage();
    await page.goto(leader.url);
    await page.waitForSelector(`#ha[data-holder="${leader.proc.holder}"][data-role="leader"]`, { timeout: domDeadlineMs });
    await page.waitForSelector('#conn[data-state="live"]', { timeout: domDeadlineMs });
    leader.proc.child.kill("SIGSTOP");
    try {
      await until("the other member leads", async () => {
        const admin = createClient(AdminService, standby.proc.address);
        try {
          return (await admin.getHaStatus({}, { timeoutMs: 5_000 }).catch(() => undefined))?.self?.role === "leader";
        } finally {
          admin.close();
        }
      }, 120_000);
    } finally {
      leader.proc.child.kill("SIGCONT");
    }
    // The resumed member steps down: its HTTP port now answers as a standby, naming the new leader.
    await until("the old leader's HTTP port names the new leader", async () => (await fetch(`${leader.url}/v1/models`).catch(() => undefined))?.headers.get("warden-leader") === standby.url, 120_000);
    await page.waitForSelector(`#ha[data-holder="${standby.proc.holder}"][data-role="leader"]`, { timeout: 120_000 });
    await page.waitForSelector('#conn[data-state="live"]', { timeout: domDeadlineMs });
    expect(new URL(page.url()).origin).toBe(standby.url);
    await page.close();
  });
});
