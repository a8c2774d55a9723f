/**
 * `warden install coordinator|agent`: the service user, <prefix>/etc/warden
 * with a config and certificates the service user can read, its state dir,
 * and a systemd unit naming this machine's node and warden binaries.
 * Idempotent: a second run changes only what differs, never overwrites a key
 * or a config (the operator's edits), and says what it did with each file.
 */
import { execFile } from "node:child_process";
import { chmod, chown, mkdir, readFile, rename, stat, writeFile } from "node:fs/promises";
import { hostname } from "node:os";
import { dirname, join, resolve } from "node:path";
import process from "node:process";
import { Code, WardenError, invalidArgument } from "@warden/common";
import { checkCoordinator, renderAgentConfig, renderAgentUnit, renderCoordinatorConfig, renderCoordinatorUnit, unitPath, type InstallPaths, type UnitFacts } from "./install-render.js";

export interface InstallOptions {
  readonly role: "coordinator" | "agent";
  /** Root of every file written; "/" on a real node, a temp dir in a test or a package build. @default "/" */
  readonly prefix?: string;
  /** The service user (created with useradd --system unless it exists). @default "warden" */
  readonly user?: string;
  /** Agent: the coordinator's NodeService address(es), written into the unit. */
  readonly coordinator?: string;
  /** Agent: this node's id. @default os.hostname() */
  readonly nodeId?: string;
  /** host:port the service listens on. @default coordinator 0.0.0.0:50051, agent 0.0.0.0:7443 */
  readonly listen?: string;
  /** Agent: host:port the coordinator dials. @default <hostname>:<listen port> */
  readonly advertise?: string;
  /** Extra names/addresses for this service's certificate (localhost and loopback are always in). */
  readonly sans?: readonly string[];
  /** The node binary and warden entry point the unit runs. @default process.execPath, process.argv[1] */
  readonly node?: string;
  readonly warden?: string;
}

const userPattern = /^[a-z_][a-z0-9_-]{0,31}$/;
const listenPattern = /^[A-Za-z0-9.[\]:-]{1,253}:[0-9]{1,5}$/;

function exec(cmd: string, args: readonly string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((res) => {
    execFile(cmd, args, { encoding: "utf8", timeout: 60_000 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === "number" ? err.code : -1;
      res({ code, stdout, stderr: err !== null && code === -1 ? err.message : stderr });
    });
  });
}

/** One line of `getent <db> <key>`, or undefined when there is none (exit 2). */
async function getent(db: "passwd" | "group", key: string): Promise<string[] | undefined> {
  const r = await exec("getent", [db, key]);
  if (r.code === 2) return undefined;
  if (r.code !== 0) throw new WardenError(Code.Internal, `getent ${db} ${key} failed (exit ${String(r.code)}): ${r.stderr.trim()}`);
  return r.stdout.trim().split(":");
}

interface ServiceUser {
  readonly name: string;
  readonly uid: number;
  readonly gid: number;
  readonly group: string;
}

/** The service user, created as a system user with its own group and no login unless it exists. */
async function ensureUser(name: string, say: (s: string) => void): Promise<ServiceUser> {
  let pw = await getent("passwd", name);
  if (pw === undefined) {
    const r = await exec("useradd", ["--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name]);
    if (r.code !== 0) throw new WardenError(Code.Internal, `useradd ${name} failed (exit ${String(r.code)}): ${r.stderr.trim()}`);
    pw = await getent("passwd", name);
    if (pw === undefined) throw new WardenError(Code.Internal, `useradd ${name} succeeded but getent passwd does not know ${name}`);
    say(`user    ${name}: created (system user, group ${name}, no login)`);
  } else say(`user    ${name}: exists, kept`);
  const uid = Number(pw[2]);
  const gid = Number(pw[3]);
  const gr = await getent("group", String(gid));
  return { name, uid, gid, group: gr?.[0] ?? String(gid) };
}

/** Makes `path` a directory with this owner and mode, saying whether anything changed. */
async function ensureDir(path: string, uid: number, gid: number, mode: number, say: (s: string) => void): Promise<void> {
  const before = await stat(path).catch(() => undefined);
  if (before !== undefined && !before.isDirectory()) throw new WardenError(Code.FailedPrecondition, `${path} exists and is not a directory`);
  if (before === undefined) {
    // Parents as any system dir (0755); only the leaf gets this mode (mkdir's mode would apply to every level it makes).
    await mkdir(dirname(path), { recursive: true, mode: 0o755 });
    await mkdir(path, { mode });
  }
  const changed = await ensureOwner(path, uid, gid, mode);
  say(`dir     ${path}: ${before === undefined ? "created" : changed ? "owner/mode fixed" : "kept"} (${modeText(mode)})`);
}

const modeText = (mode: number): string => `0${mode.toString(8)}`;

/** chown/chmod only what differs; true when it changed something. */
async function ensureOwner(path: string, uid: number, gid: number, mode: number): Promise<boolean> {
  const s = await stat(path);
  let changed = false;
  if (s.uid !== uid || s.gid !== gid) {
    await chown(path, uid, gid);
    changed = true;
  }
  if ((s.mode & 0o7777) !== mode) {
    await chmod(path, mode);
    changed = true;
  }
  return changed;
}

const exists = (p: string): Promise<boolean> => stat(p).then(() => true, () => false);

/** Writes a file only when missing (a config: the operator's edits win); says which. */
async function writeOnce(path: string, text: string, gid: number, say: (s: string) => void): Promise<void> {
  if (await exists(path)) {
    say(`config  ${path}: exists, kept (not overwritten)`);
    return;
  }
  await writeFile(path, text, { mode: 0o640, flag: "wx" });
  await ensureOwner(path, 0, gid, 0o640);
  say(`config  ${path}: written (root:${String(gid)} 0640)`);
}

/** Writes a unit when its content differs (atomically: a reader never sees half of it). */
async function writeUnit(path: string, text: string, say: (s: string) => void): Promise<void> {
  const old = await readFile(path, "utf8").catch(() => undefined);
  if (old === text) {
    say(`unit    ${path}: unchanged`);
    return;
  }
  const tmp = `${path}.warden-tmp`;
  await writeFile(tmp, text, { mode: 0o644 });
  await chmod(tmp, 0o644);
  await rename(tmp, path);
  say(`unit    ${path}: ${old === undefined ? "written" : "updated"}`);
}

/**
 * The certificates this role needs, made with the CA in the certs dir when
 * missing (never over an existing key). The service's key is 0640
 * root:<service group>: the service reads it, cannot change or replace it,
 * and no other user reads it. The CA key and the operator's admin key stay
 * 0600 root: the services never need them.
 */
async function ensureCerts(o: { role: "coordinator" | "agent"; certsDir: string; name: string; sans: readonly string[]; gid: number }, say: (s: string) => void): Promise<void> {
  const { certsInit, certsIssue } = await import("./certs.js");
  const ca = join(o.certsDir, "ca.pem");
  const caKey = join(o.certsDir, "ca-key.pem");
  const cert = join(o.certsDir, `${o.name}.pem`);
  const key = join(o.certsDir, `${o.name}-key.pem`);
  if (o.role === "coordinator" && !(await exists(ca)) && !(await exists(caKey))) {
    await certsInit({ out: o.certsDir, coordinatorSans: o.sans });
    say(`certs   ${o.certsDir}: CA, coordinator and admin (operator) certificates created`);
  } else if (!(await exists(cert)) && !(await exists(key))) {
    if (!(await exists(caKey)))
      throw new WardenError(
        Code.FailedPrecondition,
        `${cert} is missing and there is no CA key here to issue it: on the coordinator's machine run \`warden certs issue ${o.role} ${o.name} --out /etc/warden/certs${o.sans.map((s) => ` --san ${s}`).join("")}\`, copy ca.pem, ${o.name}.pem and ${o.name}-key.pem into ${o.certsDir}, then run warden install again`,
      );
    await certsIssue({ out: o.certsDir, kind: o.role, name: o.name, sans: o.sans });
    say(`certs   ${cert}: issued`);
  } else say(`certs   ${cert}: exists, kept`);
  for (const f of [ca, cert, key]) if (!(await exists(f))) throw new WardenError(Code.FailedPrecondition, `${f} is missing (its pair exists): put it back or remove both to issue a new one`);
  for (const f of [ca, cert]) await ensureOwner(f, 0, 0, 0o644);
  if (await ensureOwner(key, 0, o.gid, 0o640)) say(`certs   ${key}: root:${String(o.gid)} 0640 (readable by the service, not writable)`);
}

async function whichAbsolute(candidates: readonly string[]): Promise<string> {
  for (const c of candidates) if (await exists(c)) return c;
  return "";
}

/** Does the whole install; returns the report lines. */
export async function install(o: InstallOptions): Promise<string[]> {
  const lines: string[] = [];
  const say = (s: string): void => {
    lines.push(s);
  };
  const prefix = resolve(o.prefix ?? "/");
  const user = o.user ?? "warden";
  if (!userPattern.test(user)) throw invalidArgument("--user", `"${user.slice(0, 40)}" must match ${userPattern.source}`);
  if (o.listen !== undefined && !listenPattern.test(o.listen)) throw invalidArgument("--listen", `must be host:port, got "${o.listen.slice(0, 80)}"`);
  if (o.advertise !== undefined && !listenPattern.test(o.advertise)) throw invalidArgument("--advertise", `must be host:port, got "${o.advertise.slice(0, 80)}"`);
  if (o.role === "agent") {
    if (o.coordinator === undefined) throw invalidArgument("--coordinator", "required for an agent: the coordinator's host:port (its listen address as this node reaches it)");
    checkCoordinator(o.coordinator);
  }
  const node = unitPath(o.node ?? process.execPath, "node binary");
  const warden = unitPath(resolve(o.warden ?? process.argv[1] ?? ""), "warden path");
  unitPath(prefix === "/" ? "/etc" : prefix, "--prefix");
  if (process.getuid?.() !== 0) throw new WardenError(Code.FailedPrecondition, "warden install must run as root: it creates a user and chowns files (with an nvm node: sudo \"$(command -v node)\" \"$(command -v warden)\" install …)");

  const svc = await ensureUser(user, say);
  const p = (...parts: string[]): string => join(prefix, ...parts);
  const stateName = o.role === "coordinator" ? "warden" : "warden-agent";
  const paths: InstallPaths = {
    etcDir: p("etc", "warden"),
    certsDir: p("etc", "warden", "certs"),
    stateDir: p("var", "lib", stateName),
    config: p("etc", "warden", `${o.role}.yaml`),
    unit: p("etc", "systemd", "system", `warden-${o.role}.service`),
  };
  await ensureDir(paths.etcDir, 0, 0, 0o755, say);
  // The certs dir: the service's group may enter it (to read its own key), nobody else.
  await ensureDir(paths.certsDir, 0, svc.gid, 0o750, say);
  // 0700: both services tighten a state dir others can read (state-dir.ts); a looser mode here would be undone at every start.
  await ensureDir(paths.stateDir, svc.uid, svc.gid, 0o700, say);
  await mkdir(p("etc", "systemd", "system"), { recursive: true, mode: 0o755 });

  const nodeId = o.nodeId ?? hostname();
  await ensureCerts({ role: o.role, certsDir: paths.certsDir, name: o.role === "coordinator" ? "coordinator" : nodeId, sans: o.sans ?? [], gid: svc.gid }, say);

  const facts: UnitFacts = { node, warden, user: svc.name, group: svc.group, paths, systemStateDir: prefix === "/" };
  if (o.role === "coordinator") {
    await writeOnce(paths.config, renderCoordinatorConfig({ listen: o.listen ?? "0.0.0.0:50051", paths }), svc.gid, say);
    await writeUnit(paths.unit, renderCoordinatorUnit(facts), say);
  } else {
    const listen = o.listen ?? "0.0.0.0:7443";
    const advertise = o.advertise ?? `${hostname()}:${listen.slice(listen.lastIndexOf(":") + 1)}`;
    const nvidiaSmi = await whichAbsolute(["/usr/bin/nvidia-smi", "/usr/local/bin/nvidia-smi"]);
    await writeOnce(paths.config, renderAgentConfig({ nodeId, listen, advertise, paths, nvidiaSmi }), svc.gid, say);
    const groups: string[] = [];
    for (const g of ["video", "render"]) if ((await getent("group", g)) !== undefined) groups.push(g);
    await writeUnit(paths.unit, renderAgentUnit({ ...facts, coordinator: o.coordinator ?? "", groups }), say);
  }
  const unitName = `warden-${o.role}`;
  say("");
  say(`next: check the config as the service user, then start it:`);
  say(`  runuser -u ${svc.name} -- ${node} ${warden} ${o.role} --check-config --config ${paths.config}`);
  say(prefix === "/" ? `  systemctl daemon-reload && systemctl enable --now ${unitName}` : `  (prefix ${prefix}: copy ${paths.unit} to /etc/systemd/system/ when the paths are final)`);
  return lines;
}
