/**
 * The nemesis test's HTTP caller (test/support/http-leader-caller.ts) on
 * local HTTP servers that answer as the operator's guide says members do
 * (a standby: 503, Retry-After, Warden-Leader; the leader: 200), so its
 * outcome kinds, which the nemesis judges, are known to mean what they say.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createTcpServer, type Server as TcpServer, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { freePort } from "./support/free-port.js";
import { createHttpLeaderCaller } from "./support/http-leader-caller.js";

const servers: (Server | TcpServer)[] = [];
const sockets: Socket[] = [];
afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
});

async function serve(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ url: string; hits: () => number }> {
  let hits = 0;
  const s = createServer((req, res) => {
    hits++;
    req.resume();
    req.on("end", () => { handler(req, res); });
  });
  servers.push(s);
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const a = s.address();
  if (a === null || typeof a === "string") throw new Error("no address");
  return { url: `http://127.0.0.1:${String(a.port)}`, hits: () => hits };
}

/** Accepts connections and never answers: a SIGSTOPped member as its clients see it. */
async function silent(): Promise<string> {
  const s = createTcpServer((sock) => sockets.push(sock));
  servers.push(s);
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const a = s.address();
  if (a === null || typeof a === "string") throw new Error("no address");
  return `http://127.0.0.1:${String(a.port)}`;
}

const standby = (leaderUrl: string | undefined) => (_: IncomingMessage, res: ServerResponse): void => {
  res.writeHead(503, { "retry-after": "1", "content-type": "application/json", ...(leaderUrl === undefined ? {} : { "warden-leader": leaderUrl }) });
  res.end(JSON.stringify({ error: { message: `not the leader (this coordinator is a standby): ${leaderUrl ?? "no leader is known yet"}`, type: "service_unavailable_error", param: null, code: "unavailable" } }));
};
const ok = (_: IncomingMessage, res: ServerResponse): void => {
  res.writeHead(200, { "content-type": "application/json" });
  res.end("{}");
};
const body = { model: "m", messages: [{ role: "user", content: "hi" }] };

describe("the nemesis test's HTTP caller", () => {
  it("a refused address is skipped, a standby's Warden-Leader is followed, and the next call goes straight to the member that served", async () => {
    const leader = await serve(ok);
    const sb = await serve(standby(leader.url));
    const dead = `http://127.0.0.1:${String(await freePort())}`;
    const caller = createHttpLeaderCaller({ urls: [dead, sb.url, leader.url] });
    expect(await caller.post("/v1/chat/completions", body, 10_000)).toMatchObject({ kind: "ok", attempts: 3 });
    expect(await caller.post("/v1/chat/completions", body, 10_000)).toMatchObject({ kind: "ok", attempts: 1 });
    expect([sb.hits(), leader.hits()]).toEqual([1, 2]);
  });

  it("a hint outside the list is not followed: the caller waits Retry-After and tries the next member of its own list", async () => {
    const leader = await serve(ok);
    const stranger = await serve(ok);
    const sb = await serve(standby(stranger.url));
    const caller = createHttpLeaderCaller({ urls: [sb.url, leader.url] });
    expect(await caller.post("/v1/chat/completions", body, 10_000)).toMatchObject({ kind: "ok", attempts: 2 });
    expect(stranger.hits()).toBe(0);
  });

  it("a member that answers nothing ends the call as \"no answer\" (a POST is not re-sent) and is tried last next time; a permanent status ends the call with its kind", async () => {
    const frozen = await silent();
    const leader = await serve(ok);
    const caller = createHttpLeaderCaller({ urls: [frozen, leader.url], attemptTimeoutMs: 300 });
    expect(await caller.post("/v1/chat/completions", body, 10_000)).toMatchObject({ kind: "no answer", attempts: 1 });
    expect(await caller.post("/v1/chat/completions", body, 10_000)).toMatchObject({ kind: "ok", attempts: 1 });
    const refusing = await serve((_, res) => {
      res.writeHead(503, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: "no node can ever take it", type: "service_unavailable_error", param: null, code: "failed_precondition" } }));
    });
    expect(await createHttpLeaderCaller({ urls: [refusing.url] }).post("/v1/chat/completions", body, 10_000)).toMatchObject({ kind: "503 failed_precondition", attempts: 1 });
  });
});
