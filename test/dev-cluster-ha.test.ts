/**
 * `npm run cluster -- --ha` smoke test, real processes (its HA part without
 * agents: three nats-servers, two `warden coordinator --ha`): each member gets
 * its own HTTP port and the banner prints both URLs; they are the URLs the
 * members announce (`warden ha status`) and the standby's HTTP names.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { repoRootPath } from "../services/agent/src/backend-sim-catalog.js";
import { freePort } from "./support/free-port.js";
import { cliHaStatus } from "./support/ha-coordinator-process.js";

const driver = fileURLToPath(new URL("./support/dev-cluster-ha-driver.ts", import.meta.url));
let child: ChildProcess | undefined;

const exited = (p: ChildProcess): Promise<void> =>
  new Promise((r) => {
    if (p.exitCode !== null || p.signalCode !== null) r();
    else
      p.once("exit", () => {
        r();
      });
  });

afterAll(async () => {
  if (child !== undefined) {
    child.kill("SIGTERM");
    await exited(child);
  }
}, 60_000);

describe("npm run cluster -- --ha", { timeout: 240_000 }, () => {
  it("gives each coordinator its own HTTP port and prints both URLs in the banner; the standby's HTTP names the leader's", async () => {
    // Two consecutive free gRPC ports are not guaranteed: coord-b takes the next one; HTTP port 0 gives each a free one.
    const listen = `127.0.0.1:${String(await freePort())}`;
    const c = spawn(process.execPath, ["--import", "tsx", driver, listen, "127.0.0.1:0"], { cwd: repoRootPath, stdio: ["ignore", "pipe", "pipe"] });
    child = c;
    const err: string[] = [];
    c.stderr.setEncoding("utf8").on("data", (d: string) => {
      err.push(d);
    });
    const banner = await new Promise<string>((resolve, reject) => {
      let out = "";
      c.stdout.setEncoding("utf8").on("data", (d: string) => {
        out += d;
        if (out.includes("Ctrl-C stops everything")) resolve(out);
      });
      c.once("exit", (code) => {
        reject(new Error(`the dev cluster exited (${String(code)}) before its banner:\n${out}\n${err.join("").slice(-3000)}`));
      });
    });
    const row = (name: string): { address: string; url: string } => {
      const m = new RegExp(`${name} \\(\\w+\\)\\s+(\\S+)\\s+HTTP (http://127\\.0\\.0\\.1:\\d+)\\s`).exec(banner);
      if (m === null) throw new Error(`no HTTP URL for ${name} in the banner:\n${banner}`);
      return { address: m[1] ?? "", url: m[2] ?? "" };
    };
    const a = row("coord-a");
    const b = row("coord-b");
    expect(a.address).toBe(listen);
    expect(a.url).not.toBe(b.url);
    expect(banner).toContain(`dashboard ${a.url}/`);
    // coord-a leads: its /ha/leader is 200; coord-b's HTTP refuses naming coord-a's URL.
    expect((await fetch(`${a.url}/ha/leader`)).status).toBe(200);
    const refused = await fetch(`${b.url}/v1/models`);
    expect(refused.status).toBe(503);
    expect(refused.headers.get("warden-leader")).toBe(a.url);
    // The banner's URLs are the ones the members announce.
    const st = (await cliHaStatus(b.address)) as { self: { holder: string; httpUrl: string }; leaderHttpUrl: string };
    expect(st.self.holder).toMatch(/^coord-b-/);
    expect(st.self.httpUrl).toBe(b.url);
    expect(st.leaderHttpUrl).toBe(a.url);

    c.kill("SIGTERM");
    await exited(c);
    expect(c.exitCode).toBe(0);
  });
});
