/**
 * A private OCI registry through a real agent process: Debian's
 * `docker-registry` with htpasswd auth (bcrypt, `htpasswd -B`), an image of a
 * model blob and a backend bundle image pushed into it by `skopeo
 * --dest-creds`, and an agent whose `registryAuthFile` (Docker's config.json
 * format) holds the login. A wrong password and a file without the registry
 * fail the start and the install with a typed reason naming the registry; a
 * SIGHUP reads the file again (a bad one is refused and the old login kept);
 * with the right password the artifact and the bundle are pulled. The agent
 * warns about a file others can read and never logs a password.
 * `--check-config` reads the file too. Needs /usr/bin/docker-registry,
 * /usr/bin/skopeo and /usr/bin/htpasswd (.ci/run installs them from apt).
 */
import { execFile } from "node:child_process";
import { chmod, mkdir, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, WardenError } from "@warden/common";
import { createClient, type Client } from "@warden/grpc";
import { AgentService, StartFailureCode, type StartBackendResponse } from "@warden/proto";
import { killLeftBehind, liveTaggedSims, newIncarnation, randomPortRange, simCatalog, tempDir, uniqueTag, waitFor } from "./support/agent-harness.js";
import { startAgentProcess, writeAgentConfig, type AgentProcess } from "./support/agent-process.js";
import { bytesOf } from "./support/artifact-server.js";
import { pushImage, startRegistry, tarOf, writeHtpasswd, type BuiltImage, type Registry } from "./support/oci-registry.js";

const fileTag = uniqueTag("oci-auth");
const ports = randomPortRange(8);
const user = "alice";
const password = "corr:ect-h0rse";
const wrongPassword = "wr0ng-pass";
const started: AgentProcess[] = [];
const agentMain = fileURLToPath(new URL("../services/agent/src/main.ts", import.meta.url));
let dir: string;
let modelsPath: string;
let configPath: string;
let authPath: string;
let registry: Registry;
let model: BuiltImage;
let bundle: BuiltImage;

const authFile = (auths: Record<string, unknown>): string => JSON.stringify({ auths });
const basic = (u: string, p: string): { auth: string } => ({ auth: Buffer.from(`${u}:${p}`).toString("base64") });

function artifact(): { source: string; sha256: string; sizeBytes: bigint; path: string } {
  const layer = model.layers[0];
  if (layer === undefined) throw new Error("no layer");
  return { source: `oci+http://${registry.host}/models/private:v1`, sha256: layer.sha256, sizeBytes: BigInt(layer.size), path: "models/private.bin" };
}

async function start(client: Client<typeof AgentService>): Promise<StartBackendResponse["event"]> {
  const a = artifact();
  const req = { incarnation: newIncarnation(), model: "private", backend: "sim", modelFile: a.path, artifacts: [a], options: [`sim.model_file_sha256:${a.sha256}`] };
  let last: StartBackendResponse["event"] = { case: undefined };
  for await (const ev of client.startBackend(req, { timeoutMs: 60_000 })) last = ev.event;
  return last;
}

async function failure(p: Promise<unknown>): Promise<WardenError> {
  const err: unknown = await p.then(() => undefined, (e: unknown) => e);
  if (!(err instanceof WardenError)) throw new Error(`expected a WardenError, got ${String(err)}`);
  return err;
}

/** Rewrites the credentials file and sends SIGHUP; resolves once the agent logged `msg` one more time. */
async function reload(proc: AgentProcess, text: string, msg: string): Promise<void> {
  const count = (): number => proc.lines.filter((l) => l.includes(`"msg":"${msg}"`)).length;
  const before = count();
  await writeFile(authPath, text);
  proc.child.kill("SIGHUP");
  await waitFor(`the agent's "${msg}"`, () => count() > before);
}

beforeAll(async () => {
  dir = await tempDir("warden-oci-auth");
  modelsPath = join(dir, "models");
  configPath = join(dir, "agent.yaml");
  authPath = join(dir, "registry-auth.json");
  await mkdir(modelsPath);
  await writeHtpasswd(join(dir, "htpasswd"), user, password);
  registry = await startRegistry(dir, { htpasswd: join(dir, "htpasswd") });
  const creds = `${user}:${password}`;
  model = await pushImage(join(dir, "layout-model"), registry.host, "models/private", "v1", [bytesOf(300_000, 11)], creds);
  bundle = await pushImage(join(dir, "layout-bundle"), registry.host, "backends/private", "v1", [tarOf([{ name: "run.sh", body: "#!/bin/sh\nexit 0\n", mode: 0o755 }])], creds);
  await writeAgentConfig(configPath, {
    nodeId: "oci-auth-node",
    stateDir: join(dir, "state"),
    modelsPath,
    ports: { min: ports.min, max: ports.max, quarantine: "0s" },
    catalog: { sim: simCatalog(fileTag), "private-bundle": { bundle: { source: `oci+http://${registry.host}/backends/private:v1@sha256:${bundle.manifest}` } } },
    grace: "5s",
    readiness: { attempts: 100, interval: "200ms", initialInterval: "25ms" },
    nvidiaSmi: "",
    orphanScanInterval: "1h",
    registryAuthFile: authPath,
  });
}, 180_000);

afterAll(async () => {
  const leaked = await liveTaggedSims(fileTag);
  await killLeftBehind(started, leaked);
  await registry.stop();
  await rm(dir, { recursive: true, force: true });
  expect(leaked).toEqual([]);
});

describe("a private registry (htpasswd) through registryAuthFile", () => {
  it("a wrong password, then no login for the registry, fail naming it; after SIGHUP with the right one the artifact and the bundle are pulled", async () => {
    await writeFile(authPath, authFile({ [registry.host]: basic(user, wrongPassword) }));
    await chmod(authPath, 0o644);
    const proc = await startAgentProcess(configPath, ["--stop-backends-on-exit"]);
    started.push(proc);
    const client = createClient(AgentService, proc.address);
    try {
      // readable by others: the agent says so, with the mode
      expect(proc.lines.some((l) => l.includes('"msg":"registryAuthFile is readable by group or others: chmod 600 it"') && l.includes('"mode":"0644"'))).toBe(true);
      const refused = `the registry ${registry.host} refused the credentials registryAuthFile holds for ${registry.host} (user "alice"; HTTP 401)`;
      let ev = await start(client);
      expect(ev.case).toBe("failed");
      if (ev.case === "failed") {
        expect(StartFailureCode[ev.value.code]).toBe("ARTIFACT_SOURCE_UNAVAILABLE");
        expect(ev.value.message).toContain(refused);
        expect(ev.value.message).toContain(artifact().source);
      }
      const install = await failure(client.installBundle({ backend: "private-bundle" }));
      expect([install.code, install.message]).toEqual([Code.Unauthenticated, expect.stringContaining(refused)]);
      expect(install.message).toContain(`backend bundle oci+http://${registry.host}/backends/private`);

      // a file naming another registry only: this one is asked anonymously and says it needs a login
      await reload(proc, authFile({ "other.example:5000": basic(user, password) }), "registry credentials reloaded");
      ev = await start(client);
      expect(ev.case === "failed" ? ev.value.message : ev.case).toContain(`the registry ${registry.host} asks for credentials (HTTP 401, Basic challenge) and registryAuthFile holds none for ${registry.host}`);

      // a broken file is refused whole, naming the field; the login read before stays in use
      await reload(proc, authFile({ [registry.host]: { auth: "not base64!" } }), "registry credentials reload refused; keeping the ones read before");
      expect(proc.lines.some((l) => l.includes(`registryAuthFile.auths[\\"${registry.host}\\"].auth: is not base64`))).toBe(true);

      await chmod(authPath, 0o600);
      await reload(proc, authFile({ [registry.host]: basic(user, password) }), "registry credentials reloaded");
      ev = await start(client);
      expect(ev.case).toBe("ready");
      const layer = model.layers[0];
      expect((await readFile(join(modelsPath, ".warden-cache", "sha256", artifact().sha256))).equals(layer?.bytes ?? Buffer.alloc(0))).toBe(true);
      expect(await client.installBundle({ backend: "private-bundle" })).toMatchObject({ alreadyInstalled: false, bundle: { installed: true, sha256: bundle.manifest } });
      expect(await readdir(join(modelsPath, ".warden-cache", "backends"))).toEqual([bundle.manifest]);
      // no password in anything the agent wrote, in clear or in base64
      const said = [...proc.lines, ...proc.stderr].join("\n");
      for (const p of [password, wrongPassword, basic(user, password).auth, basic(user, wrongPassword).auth]) expect(said).not.toContain(p);
    } finally {
      client.close();
      await proc.terminate();
    }
  }, 180_000);

  it("--check-config reads the file: a bad one exits 2 naming the field, a good one is summarised with a mode warning", async () => {
    // Its own config without the bundle entry (whose run.sh exists only once installed).
    const checkPath = join(dir, "check.yaml");
    await writeAgentConfig(checkPath, { nodeId: "check-node", stateDir: join(dir, "state"), ports: { min: ports.min, max: ports.max }, catalog: { sim: simCatalog(fileTag) }, nvidiaSmi: "", registryAuthFile: authPath });
    const check = (): Promise<{ code: number; stdout: string; stderr: string }> =>
      promisify(execFile)(process.execPath, ["--import", "tsx", agentMain, "--config", checkPath, "--check-config"], { timeout: 60_000 }).then(
        (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
        (err: unknown) => {
          const e = err as { code: number; stdout: string; stderr: string };
          return { code: e.code, stdout: e.stdout, stderr: e.stderr };
        },
      );
    await writeFile(authPath, authFile({ [registry.host]: { username: user } }));
    const bad = await check();
    expect([bad.code, bad.stderr]).toEqual([2, `config ${checkPath}: registryAuthFile.auths["${registry.host}"].password: required beside username\n`]);
    await writeFile(authPath, authFile({ [registry.host]: basic(user, password) }));
    await chmod(authPath, 0o640);
    const good = await check();
    expect(good.code).toBe(0);
    expect(good.stdout).toContain(`registries  1 with credentials (${authPath})`);
    expect(good.stderr).toBe(`config ${checkPath}: warning: registryAuthFile ${authPath} has mode 0640, readable by group or others: chmod 600 it\n`);
    expect(good.stdout + good.stderr).not.toContain(password);
  }, 120_000);
});
