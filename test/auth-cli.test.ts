/**
 * The CLI against a coordinator with auth on, each command its own process
 * (the built `warden`): WARDEN_TOKEN and --token-file send the bearer token; no
 * token, an unknown one, or a role that may not is exit 9 with one line that
 * never shows the token; `--json` output never carries it; `warden tokens
 * mint` makes a token whose printed line the coordinator accepts, and with
 * `--priority` a line whose class the coordinator honours.
 */
import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, WardenError } from "@warden/common";
import { TokenTable, hashToken, mintToken } from "@warden/coordinator";
import { createClient } from "@warden/grpc";
import { AdminService, InferenceService } from "@warden/proto";
import { simModel, startTestCoordinator, type TestCoordinator } from "./support/coordinator-harness.js";
import { withToken, writeTokensFile } from "./support/auth-tokens.js";

const root = resolve(import.meta.dirname, "..");
const cliBin = join(root, "services", "cli", "bin", "warden.js");

/** Asynchronous: the coordinator answers from this process meanwhile. */
function warden(args: string[], env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, [cliBin, ...args], { cwd: root, env: { ...process.env, NO_COLOR: "1", WARDEN_TOKEN: "", ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (b: Buffer) => (stdout += b.toString()));
    child.stderr.on("data", (b: Buffer) => (stderr += b.toString()));
    child.once("error", fail);
    child.once("close", (code) => {
      done({ code: code ?? -1, stdout, stderr });
    });
  });
}

describe("warden CLI with auth on", () => {
  let tc: TestCoordinator;
  let dir: string;
  let tokens: Record<"viewer" | "operator", string>;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "warden-auth-cli-"));
    const t = await writeTokensFile(dir, { viewer: { role: "viewer" }, operator: { role: "operator" } });
    tokens = t.tokens;
    await writeFile(join(dir, "operator.token"), `${tokens.operator}\n`, { mode: 0o600 });
    tc = await startTestCoordinator({ models: [simModel("small")], extra: { auth: { tokensFile: t.path } } });
  }, 60_000);

  afterAll(async () => {
    await tc.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("no token, an unknown one, and a viewer's load are exit 9 naming the fix; WARDEN_TOKEN and --token-file work; neither output shows a token", async () => {
    const addr = ["--addr", tc.c.address];
    const none = await warden(["nodes", "ls", ...addr]);
    expect(none.code).toBe(9);
    expect(none.stderr).toMatch(/unauthenticated.*bearer token is required.*WARDEN_TOKEN or --token-file/);
    const unknown = mintToken();
    const wrong = await warden(["models", "ls", ...addr, "--json"], { WARDEN_TOKEN: unknown });
    expect(wrong.code).toBe(9);
    expect(wrong.stderr).toContain("unknown token");
    const viewer = await warden(["nodes", "ls", ...addr, "--json"], { WARDEN_TOKEN: tokens.viewer });
    expect(viewer.code).toBe(0);
    expect(JSON.parse(viewer.stdout)).toMatchObject({ nodes: [{ nodeId: "local" }] });
    const denied = await warden(["models", "load", "small", ...addr], { WARDEN_TOKEN: tokens.viewer });
    expect(denied.code).toBe(9);
    expect(denied.stderr).toMatch(/permission_denied.*role viewer may not call warden\.v1\.AdminService\/LoadModel \(needs operator/);
    // --token-file wins over WARDEN_TOKEN.
    const drain = await warden(["nodes", "undrain", "local", ...addr, "--json", "--token-file", join(dir, "operator.token")], { WARDEN_TOKEN: tokens.viewer });
    expect(drain.code).toBe(0);
    for (const r of [none, wrong, viewer, denied, drain]) for (const t of [unknown, tokens.viewer, tokens.operator]) expect(r.stdout + r.stderr).not.toContain(t);
  }, 120_000);

  it("tokens mint --out writes the token (mode 0600) and prints a line the coordinator's parser accepts, with the token's hash", async () => {
    const out = join(dir, "gpu-9.token");
    const r = await warden(["tokens", "mint", "--role", "node", "--node", "gpu-9", "--name", "gpu9", "--out", out]);
    expect(r.code).toBe(0);
    const token = (await readFile(out, "utf8")).trim();
    expect((await stat(out)).mode & 0o777).toBe(0o600);
    const line = r.stdout.trim();
    expect(line).toBe(`${hashToken(token)} node node=gpu-9 name=gpu9`);
    expect(r.stdout + r.stderr).not.toContain(token);
    expect(TokenTable.parse(line, "line").lookup(token)).toMatchObject({ role: "node", nodeId: "gpu-9" });
    const again = await warden(["tokens", "mint", "--role", "admin", "--out", out]);
    expect(again.code).toBe(2);
    expect((await readFile(out, "utf8")).trim()).toBe(token);
    expect((await warden(["tokens", "mint", "--role", "root"])).code).toBe(2);
  }, 120_000);
});

describe("warden tokens mint --priority", () => {
  it("the minted line carries priority=, and the coordinator reading it runs the token's calls at that class", async () => {
    const dir = await mkdtemp(join(tmpdir(), "warden-mint-priority-"));
    let tc: TestCoordinator | undefined;
    try {
      const crit = await warden(["tokens", "mint", "--role", "inference", "--name", "crit", "--priority", "critical", "--out", join(dir, "crit.token")]);
      const shed = await warden(["tokens", "mint", "--role", "inference", "--name", "shed", "--priority", "sheddable", "--out", join(dir, "shed.token")]);
      expect([crit.code, shed.code]).toEqual([0, 0]);
      const critToken = (await readFile(join(dir, "crit.token"), "utf8")).trim();
      const shedToken = (await readFile(join(dir, "shed.token"), "utf8")).trim();
      expect(crit.stdout.trim()).toBe(`${hashToken(critToken)} inference name=crit priority=critical`);
      expect(shed.stdout.trim()).toBe(`${hashToken(shedToken)} inference name=shed priority=sheddable`);
      expect((await warden(["tokens", "mint", "--role", "inference", "--priority", "urgent"])).code).toBe(2);

      // The coordinator's tokens file: an admin line, then the two minted lines as printed.
      const t = await writeTokensFile(dir, { admin: { role: "admin" } });
      await writeFile(t.path, `${await readFile(t.path, "utf8")}${crit.stdout}${shed.stdout}`, { mode: 0o600 });
      tc = await startTestCoordinator({
        models: [{ ...simModel("m"), replicas: { targetInFlight: 1 }, admission: { maxInFlightPerReplica: 1, maxQueued: 6, shedAtQueued: 1, maxQueuedPerPrincipal: 2, retryAfter: "2s" } }],
        extra: { auth: { tokensFile: t.path } },
      });
      const admin = createClient(AdminService, tc.c.address, withToken(t.tokens.admin));
      await admin.loadModel({ model: "m" }, { timeoutMs: 60_000 });
      const ask = async (token: string, priority: string): Promise<{ code: Code; message: string }> => {
        const client = createClient(InferenceService, tc?.c.address ?? "none", { headers: { ...(withToken(token).headers ?? {}), "warden-priority": priority } });
        try {
          await client.predict({ model: "m", options: { Prompt: "hello", Tokens: 1 } }, { timeoutMs: 60_000 });
          return { code: Code.Ok, message: "" };
        } catch (err) {
          const e = WardenError.from(err);
          return { code: e.code, message: e.rawMessage };
        } finally {
          client.close();
        }
      };
      // A token without priority= may ask for standard at most: critical is allowed only through the minted field.
      expect(await ask(critToken, "critical")).toEqual({ code: Code.Ok, message: "" });
      const raised = await ask(shedToken, "standard");
      expect(raised.code).toBe(Code.PermissionDenied);
      expect(raised.message).toMatch(/warden-priority: this token may ask for sheddable or lower, not standard/);
      expect((await ask(shedToken, "sheddable")).code).toBe(Code.Ok);
      admin.close();
    } finally {
      await tc?.close();
      await rm(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
