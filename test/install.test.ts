/**
 * `warden install` as an operator runs it: from the installed tarball, as
 * root, into a throwaway root prefix, with a real service user made by
 * useradd (a unique name, removed afterwards). The coordinator and an agent
 * then run AS THAT USER with the rendered configs and the rendered units'
 * own command lines, answer a predict over mutual TLS, and
 * `systemd-analyze verify` accepts the units. Needs root, useradd and
 * systemd-analyze (Debian: passwd, systemd); not a running systemd.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, readFileSync, readdirSync, renameSync, statSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { until } from "./support/coordinator-harness.js";
import { freePort } from "./support/free-port.js";
import { testPortRange } from "./support/port-range.js";

const root = resolve(import.meta.dirname, "..");
const env = (): NodeJS.ProcessEnv => {
  const e: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: "1" };
  delete e.NODE_OPTIONS;
  delete e.NODE_PATH;
  delete e.WARDEN_ADDR;
  return e;
};

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}
function run(cmd: string, args: readonly string[]): Run {
  const r = spawnSync(cmd, args, { env: env(), encoding: "utf8", timeout: 120_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

const user = `wdt${randomBytes(5).toString("hex")}`;
/** As the service user: setpriv execs (no PAM session, no extra parent), so the pid we signal is the service's. */
const asUser = (argv: readonly string[]): [string, string[]] => ["setpriv", ["--reuid", user, "--regid", user, "--init-groups", "--", ...argv]];

const cleanups: (() => Promise<void> | void)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c();
});

function stopped(p: ChildProcess): Promise<void> {
  return new Promise((r) => {
    if (p.exitCode !== null || p.signalCode !== null) r();
    else
      p.once("exit", () => {
        r();
      });
  });
}

/** The lines of an install report that say it changed something. */
const changes = (out: string): string[] => out.split("\n").filter((l) => /: (created|written|issued|updated|owner\/mode fixed)|0640 \(readable/.test(l));

/** Processes running as this run's throwaway user (none other than this test's own can: the name is new). */
function userPids(): number[] {
  const uid = Number(spawnSync("id", ["-u", user], { encoding: "utf8" }).stdout.trim());
  if (!Number.isInteger(uid) || uid <= 0) return [];
  return readdirSync("/proc")
    .filter((d) => /^\d+$/.test(d))
    .filter((d) => {
      try {
        return statSync(`/proc/${d}`).uid === uid;
      } catch {
        return false;
      }
    })
    .map(Number);
}

/** The command line of a unit's `key=` (the renderer refuses paths that would need quoting, so spaces split it). */
function unitCommand(unit: string, key: "ExecStart" | "ExecStartPre"): string[] {
  const line = unit.split("\n").find((l) => l.startsWith(`${key}=`));
  expect(line, key).toBeDefined();
  return line!.slice(key.length + 1).split(" ");
}

describe("warden install (root, a real service user, the installed tarball)", () => {
  let work = "";
  let warden = "";
  let prefix = "";
  let coordAddr = "";
  let agentAddr = "";
  const nodeId = `inst-${randomBytes(3).toString("hex")}`;
  const etc = (...p: string[]): string => join(prefix, "etc", ...p);

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), "warden-install-"));
    cleanups.push(() => rm(work, { recursive: true, force: true }));
    // mkdtemp makes 0700: the service user must reach the installed package and the prefix.
    chmodSync(work, 0o755);
    const { packWarden } = (await import(join(root, "services", "cli", "build", "pack.mjs"))) as { packWarden: (out: string) => Promise<string> };
    const tgz = await packWarden(work);
    const npmPrefix = join(work, "npm");
    const inst = run("npm", ["install", "-g", "--offline", "--no-audit", "--no-fund", "--prefix", npmPrefix, tgz]);
    expect(inst.code, inst.stderr).toBe(0);
    warden = join(npmPrefix, "bin", "warden");
    prefix = join(work, "root");
    coordAddr = `127.0.0.1:${String(await freePort())}`;
    agentAddr = `127.0.0.1:${String(await freePort())}`;
    cleanups.push(() => {
      // Whatever still runs as this run's throwaway user was started by this test (a backend of a failed run): userdel refuses while it lives.
      for (const pid of userPids()) process.kill(pid, "SIGKILL");
      // userdel -r is not wanted (no home); the group goes with the user (USERGROUPS_ENAB), else groupdel.
      spawnSync("userdel", [user]);
      spawnSync("groupdel", [user]);
    });
  }, 120_000);

  it("installs both roles, and a second run changes nothing and keeps every key", () => {
    const c = run(warden, ["install", "coordinator", "--prefix", prefix, "--user", user, "--listen", coordAddr]);
    expect(c.stderr).toBe("");
    expect(c.code).toBe(0);
    expect(c.stdout).toContain(`user    ${user}: created`);
    const a = run(warden, ["install", "agent", "--prefix", prefix, "--user", user, "--coordinator", coordAddr, "--node-id", nodeId, "--listen", agentAddr, "--advertise", agentAddr]);
    expect(a.stderr).toBe("");
    expect(a.code).toBe(0);
    expect(a.stdout).toContain(`${nodeId}.pem: issued`);
    const help = run(warden, ["install", "--help"]);
    expect([help.code, help.stdout]).toEqual([0, expect.stringContaining("--prefix <dir>")]);
    // Not root: refused before touching anything, saying why.
    const notRoot = run(...asUser([process.execPath, warden, "install", "agent", "--prefix", join(work, "not-root"), "--user", user, "--coordinator", coordAddr]));
    expect([notRoot.code === 0, notRoot.stderr]).toEqual([false, expect.stringContaining("warden install must run as root")]);
    expect(run("test", ["-e", join(work, "not-root")]).code).not.toBe(0);
    expect(run("getent", ["passwd", user]).stdout).toMatch(new RegExp(`^${user}:x:\\d+:\\d+:.*:/usr/sbin/nologin$`, "m"));

    const keys = ["coordinator-key.pem", `${nodeId}-key.pem`, "ca-key.pem", "admin-key.pem"].map((k) => etc("warden", "certs", k));
    const before = keys.map((k) => [readFileSync(k, "utf8"), statSync(k).mtimeMs] as const);
    const units = ["coordinator", "agent"].map((r) => etc("systemd", "system", `warden-${r}.service`));
    const unitsBefore = units.map((u) => statSync(u).mtimeMs);
    const again = run(warden, ["install", "agent", "--prefix", prefix, "--user", user, "--coordinator", coordAddr, "--node-id", nodeId, "--listen", agentAddr, "--advertise", agentAddr]);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain(`user    ${user}: exists, kept`);
    expect(again.stdout).toContain("exists, kept (not overwritten)");
    expect(again.stdout).toContain("unchanged");
    expect(changes(again.stdout)).toEqual([]);
    const coordAgain = run(warden, ["install", "coordinator", "--prefix", prefix, "--user", user, "--listen", coordAddr]);
    expect(coordAgain.code).toBe(0);
    expect(changes(coordAgain.stdout)).toEqual([]);
    expect(keys.map((k) => [readFileSync(k, "utf8"), statSync(k).mtimeMs] as const)).toEqual(before);
    expect(units.map((u) => statSync(u).mtimeMs)).toEqual(unitsBefore);
  });

  it("makes the service's keys 0640 root:<service group> and keeps the CA and admin keys root-only", () => {
    const gid = Number(run("id", ["-g", user]).stdout.trim());
    for (const k of ["coordinator-key.pem", `${nodeId}-key.pem`]) {
      const s = statSync(etc("warden", "certs", k));
      expect([k, s.uid, s.gid, s.mode & 0o777]).toEqual([k, 0, gid, 0o640]);
    }
    for (const k of ["ca-key.pem", "admin-key.pem"]) expect([k, statSync(etc("warden", "certs", k)).mode & 0o777]).toEqual([k, 0o600]);
    expect(statSync(etc("warden", "certs")).mode & 0o777).toBe(0o750);
  });

  it("renders units with the absolute node and warden paths, the coordinator address and only existing groups, and systemd-analyze verify passes", () => {
    const coordUnit = readFileSync(etc("systemd", "system", "warden-coordinator.service"), "utf8");
    const agentUnit = readFileSync(etc("systemd", "system", "warden-agent.service"), "utf8");
    for (const u of [coordUnit, agentUnit]) {
      expect(u).not.toContain("/usr/bin/env");
      expect(u).toContain(`User=${user}\n`);
    }
    expect(unitCommand(agentUnit, "ExecStart").slice(0, 2)).toEqual([process.execPath, warden]);
    // The coordinator's node runs with a larger young generation; this node accepts the flag.
    const coordStart = unitCommand(coordUnit, "ExecStart");
    expect(coordStart.slice(0, 5)).toEqual([process.execPath, "--max-semi-space-size=64", warden, "coordinator", "--config"]);
    expect(run(process.execPath, ["--max-semi-space-size=64", "-e", ""]).code).toBe(0);
    expect(unitCommand(agentUnit, "ExecStart")).toEqual([process.execPath, warden, "agent", "--config", etc("warden", "agent.yaml"), "--coordinator", coordAddr]);
    const groups = /^SupplementaryGroups=(.*)$/m.exec(agentUnit)?.[1]?.split(" ") ?? [];
    for (const g of groups) expect(run("getent", ["group", g]).code, `group ${g}`).toBe(0);
    const v = run("systemd-analyze", ["verify", etc("systemd", "system", "warden-coordinator.service"), etc("systemd", "system", "warden-agent.service")]);
    expect(v.stderr).toBe("");
    expect(v.code).toBe(0);
  });

  it("--check-config (as the service user) passes on the installed configs and fails naming each missing file", () => {
    const coordCheck = unitCommand(readFileSync(etc("systemd", "system", "warden-coordinator.service"), "utf8"), "ExecStartPre");
    const agentCheck = unitCommand(readFileSync(etc("systemd", "system", "warden-agent.service"), "utf8"), "ExecStartPre");
    const ok = [run(...asUser(coordCheck)), run(...asUser(agentCheck))];
    expect(ok.map((r) => [r.code, `${r.stdout}${r.stderr}`])).toEqual([
      [0, expect.stringContaining(`config ${etc("warden", "coordinator.yaml")}: valid`)],
      [0, expect.stringContaining(`config ${etc("warden", "agent.yaml")}: valid`)],
    ]);
    // The shipped example names /etc/warden/certs/* that this machine does not have.
    const example = join(warden, "..", "..", "lib", "node_modules", "warden", "deploy", "coordinator.example.yaml");
    const ex = run(warden, ["coordinator", "--check-config", "--config", example]);
    expect([ex.code, ex.stderr]).toEqual([2, expect.stringContaining("tls.cert: cannot read /etc/warden/certs/coordinator.pem: no such file")]);
    const cert = etc("warden", "certs", "coordinator.pem");
    renameSync(cert, `${cert}.away`);
    try {
      const r = run(...asUser(coordCheck));
      expect([r.code, r.stderr]).toEqual([2, expect.stringContaining(`tls.cert: cannot read ${cert}: no such file`)]);
    } finally {
      renameSync(`${cert}.away`, cert);
    }
    const cfg = readFileSync(etc("warden", "coordinator.yaml"), "utf8");
    const tokens = join(work, "no-tokens");
    writeFileSync(join(work, "coord-tokens.yaml"), `${cfg}auth:\n  tokensFile: ${tokens}\n`);
    const t = run(...asUser([process.execPath, warden, "coordinator", "--check-config", "--config", join(work, "coord-tokens.yaml")]));
    expect([t.code, t.stderr]).toEqual([2, expect.stringContaining(`auth.tokensFile: cannot read ${tokens}`)]);
    const agentCfg = readFileSync(etc("warden", "agent.yaml"), "utf8");
    const models = join(work, "no-models");
    writeFileSync(join(work, "agent-models.yaml"), `${agentCfg}modelsPath: ${models}\n`);
    const m = run(...asUser([process.execPath, warden, "agent", "--check-config", "--config", join(work, "agent-models.yaml")]));
    expect([m.code, m.stderr]).toEqual([2, expect.stringContaining(`modelsPath: cannot read ${models}: no such file`)]);
    // A coordinator's embedded agent names files too.
    writeFileSync(join(work, "embedded.yaml"), `listen: 127.0.0.1:1\nstateDir: ${join(work, "embedded")}\nagent:\n  modelsPath: ${models}\nmodels:\n  - { id: m, backend: backend-sim }\n`);
    const em = run(warden, ["coordinator", "--check-config", "--config", join(work, "embedded.yaml")]);
    expect([em.code, em.stderr]).toEqual([2, expect.stringContaining(`agent.modelsPath: cannot read ${models}: no such file`)]);
    // A state dir the service user cannot write (root's 0700) would fail every start.
    const rootOnly = join(work, "root-only");
    run("mkdir", ["-m", "0700", rootOnly]);
    writeFileSync(join(work, "agent-state.yaml"), agentCfg.replace(/^stateDir: .*$/m, `stateDir: ${rootOnly}/state`));
    const st = run(...asUser([process.execPath, warden, "agent", "--check-config", "--config", join(work, "agent-state.yaml")]));
    expect([st.code, st.stderr]).toEqual([2, expect.stringContaining(`stateDir: cannot write ${rootOnly}/state`)]);
    writeFileSync(join(work, "coord-state.yaml"), cfg.replace(/^stateDir: .*$/m, `stateDir: ${rootOnly}`));
    const cs = run(...asUser([process.execPath, warden, "coordinator", "--check-config", "--config", join(work, "coord-state.yaml")]));
    expect([cs.code, cs.stderr]).toEqual([2, expect.stringContaining(`stateDir: cannot write ${rootOnly}: permission denied`)]);
    writeFileSync(join(work, "agent-token.yaml"), `${agentCfg}coordinatorTokenFile: ${tokens}\n`);
    const ct = run(...asUser([process.execPath, warden, "agent", "--check-config", "--config", join(work, "agent-token.yaml")]));
    expect([ct.code, ct.stderr]).toEqual([2, expect.stringContaining(`coordinatorTokenFile: cannot read ${tokens}`)]);
  });

  it("runs the coordinator and the agent as the service user from the units' command lines and answers a predict over mutual TLS", async () => {
    // Backends in this run's private port window (other suites share the machine); the rest is the installed config.
    const ports = testPortRange(20);
    const agentYaml = etc("warden", "agent.yaml");
    writeFileSync(agentYaml, readFileSync(agentYaml, "utf8").replace(/^ports: .*$/m, `ports: { min: ${String(ports.min)}, max: ${String(ports.max)} }`));
    const start = (argv: string[]): { p: ChildProcess; out: () => string } => {
      const [cmd, args] = asUser(argv);
      const p = spawn(cmd, args, { env: env(), stdio: ["ignore", "pipe", "pipe"] });
      let out = "";
      p.stdout.on("data", (b: Buffer) => (out += b.toString()));
      p.stderr.on("data", (b: Buffer) => (out += b.toString()));
      cleanups.push(async () => {
        // SIGTERM first: the agent (--stop-backends-on-exit) stops its backends; SIGKILL if it hangs.
        p.kill("SIGTERM");
        const timer = setTimeout(() => p.kill("SIGKILL"), 15_000);
        await stopped(p);
        clearTimeout(timer);
      });
      return { p, out: () => out };
    };
    const coord = start(unitCommand(readFileSync(etc("systemd", "system", "warden-coordinator.service"), "utf8"), "ExecStart"));
    await until("the coordinator listening", () => coord.out().includes("Warden is running") || coord.p.exitCode !== null, 60_000);
    expect(coord.p.exitCode, coord.out()).toBeNull();
    // As the unit, plus --stop-backends-on-exit so no backend outlives the test (the unit leaves them for adoption).
    const agent = start([...unitCommand(readFileSync(etc("systemd", "system", "warden-agent.service"), "utf8"), "ExecStart"), "--stop-backends-on-exit"]);
    const tls = ["--addr", coordAddr, "--tls-ca", etc("warden", "certs", "ca.pem"), "--tls-cert", etc("warden", "certs", "admin.pem"), "--tls-key", etc("warden", "certs", "admin-key.pem")];
    await until(
      "the agent registered",
      () => {
        if (agent.p.exitCode !== null) return true;
        const r = run(warden, ["nodes", "ls", "--json", ...tls]);
        return r.code === 0 && r.stdout.includes(nodeId) && r.stdout.includes("NODE_STATE_READY");
      },
      60_000,
    );
    expect(agent.p.exitCode, agent.out()).toBeNull();
    const predict = run(warden, ["predict", "smoke", "hello", ...tls]);
    expect(predict.stderr).not.toContain("warden:");
    expect(predict.code).toBe(0);
    expect(predict.stdout.trim()).not.toBe("");
    // Both ran as the service user, and the state each wrote is the user's.
    const uid = Number(run("id", ["-u", user]).stdout.trim());
    for (const pid of [coord.p.pid, agent.p.pid]) expect(statSync(`/proc/${String(pid)}`).uid).toBe(uid);
    agent.p.kill("SIGTERM");
    coord.p.kill("SIGTERM");
    await Promise.all([stopped(agent.p), stopped(coord.p)]);
    expect([agent.p.exitCode, coord.p.exitCode]).toEqual([0, 0]);
    // After the services ran (and wrote their state), installing again still changes nothing.
    const again = run(warden, ["install", "agent", "--prefix", prefix, "--user", user, "--coordinator", coordAddr, "--node-id", nodeId, "--listen", agentAddr, "--advertise", agentAddr]);
    expect([again.code, changes(again.stdout)]).toEqual([0, []]);
    const coordAgain = run(warden, ["install", "coordinator", "--prefix", prefix, "--user", user, "--listen", coordAddr]);
    expect([coordAgain.code, changes(coordAgain.stdout)]).toEqual([0, []]);
  }, 120_000);
});
