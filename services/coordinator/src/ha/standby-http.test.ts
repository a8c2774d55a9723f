import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { nullLogger } from "@warden/common";
import { parseCoordinatorConfig } from "../config/coordinator-config.js";
import { mintToken, tokenLine } from "../auth/token-table.js";
import type { DashboardHa } from "../http/dashboard/dashboard-view.js";
import type { HttpServer } from "../http/http-server.js";
import { haHttpView, httpUrlOf, pinHttpListen } from "./ha-http.js";
import { startStandbyHttp } from "./standby-http.js";

const config = parseCoordinatorConfig("listen: 127.0.0.1:7070\nhttpListen: 127.0.0.1:0\n");
const leaderUrl = "http://10.0.0.5:8080";
const withLeader: DashboardHa = { enabled: true, self: { holder: "b", role: "standby", httpUrl: "http://127.0.0.1:1" }, leader: { holder: "a", role: "leader", httpUrl: leaderUrl }, epoch: "3", members: [] };
const noLeader: DashboardHa = { enabled: true, self: { holder: "b", role: "standby", httpUrl: "http://127.0.0.1:1" }, epoch: "0", members: [] };

let server: HttpServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

async function standby(view: DashboardHa, c = config): Promise<string> {
  server = await startStandbyHttp({ config: c, listen: "127.0.0.1:0", view: () => view, log: nullLogger });
  return `http://${server.address}`;
}

describe("a standby's HTTP listener", () => {
  it("without a known leader: 503 + Retry-After and no hint; the page is served (it waits and follows)", async () => {
    const url = await standby(noLeader);
    const r = await fetch(`${url}/v1/models`);
    expect(r.status).toBe(503);
    expect(r.headers.get("retry-after")).toBe("1");
    expect(r.headers.get("warden-leader")).toBeNull();
    expect(((await r.json()) as { error: { message: string } }).error.message).toContain("no leader is known yet");
    const page = await fetch(`${url}/`, { redirect: "manual" });
    expect(page.status).toBe(503);
    expect(page.headers.get("content-security-policy")).toContain("default-src 'none'");
    expect(await page.text()).toContain('id="ha"');
    expect((await fetch(`${url}/dashboard/app.js`)).status).toBe(200);
    expect((await fetch(`${url}/ha/leader`)).status).toBe(503);
  });

  it("with a leader: 307 for the page unless the page left that leader; any upload refused before its body is parsed", async () => {
    const url = await standby(withLeader);
    const page = await fetch(`${url}/`, { redirect: "manual" });
    expect(page.status).toBe(307);
    expect(page.headers.get("location")).toBe(`${leaderUrl}/`);
    expect((await fetch(`${url}/?left=a`, { redirect: "manual" })).status).toBe(503);
    const form = new FormData();
    form.append("file", new Blob(["RIFF"]), "a.wav");
    form.append("model", "whisper");
    const up = await fetch(`${url}/v1/audio/transcriptions`, { method: "POST", body: form });
    expect(up.status).toBe(503);
    expect(up.headers.get("warden-leader")).toBe(leaderUrl);
    const dash = await fetch(`${url}/api/dashboard/snapshot`);
    expect(dash.status).toBe(503);
    expect(await dash.json()).toEqual({ error: { code: "unavailable", message: `not the leader (this coordinator is a standby): the leader's HTTP API is at ${leaderUrl}` } });
    expect(await (await fetch(`${url}/api/dashboard/ha`)).json()).toEqual(withLeader);
  });
});

describe("a standby's HTTP listener with auth on", () => {
  it("the dashboard's calls want a valid token first (a page is asked for it there); /ha/leader and the API's refusal need none and list no members", async () => {
    const dir = await mkdtemp(join(tmpdir(), "warden-standby-http-"));
    try {
      const token = mintToken();
      const tokensFile = join(dir, "tokens");
      await writeFile(tokensFile, `${tokenLine(token, "viewer", { name: "v" })}\n`, { mode: 0o600 });
      const url = await standby({ ...withLeader, members: [withLeader.self!, withLeader.leader!] }, parseCoordinatorConfig(`listen: 127.0.0.1:7070\nhttpListen: 127.0.0.1:0\nauth:\n  tokensFile: ${tokensFile}\n`));
      expect((await fetch(`${url}/api/dashboard/whoami`)).status).toBe(401);
      expect((await fetch(`${url}/api/dashboard/ha`)).status).toBe(401);
      const auth = { headers: { authorization: `Bearer ${token}` } };
      expect((await fetch(`${url}/api/dashboard/whoami`, auth)).status).toBe(503);
      expect(((await (await fetch(`${url}/api/dashboard/ha`, auth)).json()) as DashboardHa).members).toHaveLength(2);
      const ready = await fetch(`${url}/ha/leader`);
      expect(ready.status).toBe(503);
      expect(((await ready.json()) as DashboardHa)).toMatchObject({ leader: { httpUrl: leaderUrl }, members: [] });
      expect((await fetch(`${url}/v1/models`)).headers.get("warden-leader")).toBe(leaderUrl);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("the HTTP URL a member announces", () => {
  it("pins port 0 to the bound port; uses the advertised host behind a wildcard; https with tls", () => {
    const pinned = pinHttpListen(config, "127.0.0.1:43210");
    expect(pinned.httpListen).toBe("127.0.0.1:43210");
    expect(pinHttpListen(pinned, "127.0.0.1:1").httpListen).toBe("127.0.0.1:43210");
    expect(httpUrlOf(pinned, "10.1.1.1:7070")).toBe("http://127.0.0.1:43210");
    expect(httpUrlOf({ ...pinned, httpListen: "0.0.0.0:8080" }, "10.1.1.1:7070")).toBe("http://10.1.1.1:8080");
    expect(httpUrlOf({ ...pinned, httpListen: "[::]:8080", tls: { cert: "c", key: "k" } as unknown as typeof config.tls }, "[fd00::1]:7070")).toBe("https://[fd00::1]:8080");
    expect(httpUrlOf({ ...pinned, httpListen: undefined }, "10.1.1.1:7070")).toBeUndefined();
  });

  it("the view names the leader's URL from its member announcement, and no leader when the key is empty", () => {
    const members = [{ holder: "a", address: "10.0.0.5:7070", role: "leader" as const, httpUrl: leaderUrl, seenAtMs: 0 }];
    const v = haHttpView({ holder: "b", role: "standby", httpUrl: "http://10.0.0.6:8080", leader: { revision: 9, holder: "a", address: "10.0.0.5:7070", epoch: 9 }, members });
    expect(v.leader).toEqual({ holder: "a", role: "leader", httpUrl: leaderUrl });
    expect(v.members.map((m) => m.holder)).toEqual(["b", "a"]);
    expect(haHttpView({ holder: "b", role: "standby", httpUrl: undefined, leader: { revision: 10, holder: null, address: undefined, epoch: 9 }, members }).leader).toBeUndefined();
  });
});
