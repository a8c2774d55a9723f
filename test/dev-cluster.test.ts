/**
 * `npm run cluster` as a user runs it (the built script, real coordinator and
 * three agent processes): its banner names the dashboard, which answers; the
 * three nodes register; SIGTERM stops everything and removes its temp dir.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { createClient } from "@warden/grpc";
import { AdminService } from "@warden/proto";
import { repoRootPath } from "../services/agent/src/backend-sim-catalog.js";
import { until } from "./support/coordinator-harness.js";
import { freePort } from "./support/free-port.js";

const script = join(repoRootPath, "services", "cli", "dist", "dev-cluster.js");
let child: ChildProcess | undefined;

const exited = (p: ChildProcess): Promise<number | null> =>
  new Promise((r) => {
    if (p.exitCode !== null || p.signalCode !== null) r(p.exitCode);
    else
      p.once("exit", (code) => {
        r(code);
      });
  });

afterAll(async () => {
  if (child !== undefined && child.exitCode === null) {
    child.kill("SIGTERM");
    await exited(child);
  }
}, 60_000);

describe("npm run cluster", { timeout: 180_000 }, () => {
  it("offers the dashboard, registers its three nodes, and cleans up on SIGTERM", async () => {
    const listen = `127.0.0.1:${String(await freePort())}`;
    const c = spawn(process.execPath, [script, "--listen", listen, "--http-listen", "127.0.0.1:0"], { cwd: repoRootPath, stdio: ["ignore", "pipe", "pipe"] });
    child = c;
    let out = "";
    c.stdout.setEncoding("utf8").on("data", (d: string) => (out += d));
    c.stderr.setEncoding("utf8").on("data", (d: string) => (out += d));
    await until("the dev cluster's banner", () => {
      if (c.exitCode !== null) throw new Error(`the dev cluster exited (${String(c.exitCode)}):\n${out}`);
      return out.includes("Ctrl-C stops everything");
    }, 120_000);
    const dashboard = /Dashboard: (http:\/\/127\.0\.0\.1:\d+\/)/.exec(out)?.[1];
    const dir = /State and logs: (\S+)/.exec(out)?.[1];
    if (dashboard === undefined || dir === undefined) throw new Error(`banner without the dashboard or state dir:\n${out}`);
    expect(out).not.toContain("npx warden");
    const page = await fetch(dashboard);
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toMatch(/^text\/html/);
    const admin = createClient(AdminService, listen);
    try {
      const nodes = await until("three registered nodes", async () => {
        const n = (await admin.listNodes({})).nodes.map((x) => x.nodeId).sort();
        return n.length === 3 ? n : undefined;
      }, 90_000);
      expect(nodes).toEqual(["gpu-a", "gpu-b", "gpu-c"]);
    } finally {
      admin.close();
    }
    expect(existsSync(dir)).toBe(true);
    c.kill("SIGTERM");
    expect(await exited(c)).toBe(0);
    expect(existsSync(dir)).toBe(false);
  });
});
