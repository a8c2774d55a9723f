import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { scanPortRange } from "./orphan-scan.js";
import { agentMarkOf, classifyEnviron, markEnv } from "./process-mark.js";

// A fixture /proc: net/tcp lists listening sockets, <pid>/fd links name their
// inodes, <pid>/environ carries (or lacks) the agent's mark.
const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

const mark = agentMarkOf("node-a", "/var/lib/warden-a");
const environ = (vars: Record<string, string>): string => Object.entries(vars).map(([k, v]) => `${k}=${v}\0`).join("");
const stat = (pid: number): string => `${String(pid)} (sim) S 1 ${String(pid)} ${String(pid)} ${Array.from({ length: 16 }, () => "0").join(" ")} 777 0 0\n`;

async function fixture(procs: { pid: number; port?: number; environ?: string }[], unowned: number[]): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), "warden-proc-"));
  dirs.push(root);
  await mkdir(join(root, "net"));
  const lines = ["  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"];
  let inode = 5000;
  const row = (port: number, ino: number): string =>
    `   0: 0100007F:${port.toString(16).toUpperCase().padStart(4, "0")} 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 ${String(ino)} 1 0000000000000000 100 0 0 10 0`;
  for (const p of procs) {
    await mkdir(join(root, String(p.pid), "fd"), { recursive: true });
    await writeFile(join(root, String(p.pid), "stat"), stat(p.pid));
    if (p.environ !== undefined) await writeFile(join(root, String(p.pid), "environ"), p.environ);
    if (p.port !== undefined) {
      inode++;
      lines.push(row(p.port, inode));
      await symlink(`socket:[${String(inode)}]`, join(root, String(p.pid), "fd", "3"));
    }
  }
  for (const port of unowned) lines.push(row(port, ++inode));
  await writeFile(join(root, "net", "tcp"), `${lines.join("\n")}\n`);
  return root;
}

describe("process mark", () => {
  it("is ours only with this node's id and this agent's token; unreadable is foreign", () => {
    const ours = environ({ ...markEnv(mark, "01J00000000000000000000001"), PATH: "/bin" });
    expect(classifyEnviron(ours, mark)).toEqual({ t: "ours", incarnation: "01J00000000000000000000001" });
    expect(classifyEnviron(environ({ PATH: "/bin" }), mark)).toEqual({ t: "foreign", detail: "no Warden mark" });
    expect(classifyEnviron(environ(markEnv(agentMarkOf("node-b", "/var/lib/warden-a"), "x")), mark)).toEqual({ t: "foreign", detail: "marked for node node-b" });
    expect(classifyEnviron(environ(markEnv(agentMarkOf("node-a", "/tmp/other-state"), "x")), mark).t).toBe("foreign");
    expect(classifyEnviron(undefined, mark).t).toBe("foreign");
    // the token follows the state dir, not the spelling of its path
    expect(agentMarkOf("node-a", "/var/lib/./warden-a/").token).toBe(mark.token);
  });
});

describe("port-range scan", () => {
  it("sorts listeners by the mark: this agent's → orphan, everything else → foreign; a known incarnation's helper is neither", async () => {
    const root = await fixture(
      [
        { pid: 100, port: 21000, environ: environ({ ...markEnv(mark, "01J0000000000000000000000A"), PATH: "/bin" }) },
        { pid: 101, port: 21001, environ: environ({ PATH: "/bin" }) },
        { pid: 102, port: 21002, environ: environ(markEnv(agentMarkOf("node-b", "/var/lib/warden-b"), "01J0000000000000000000000B")) },
        { pid: 103, port: 21003, environ: environ(markEnv(agentMarkOf("node-a", "/home/dev/.warden/agent"), "01J0000000000000000000000C")) },
        { pid: 104, port: 21004 }, // environ unreadable
        { pid: 105, port: 21005, environ: environ(markEnv(mark, "01J0000000000000000000000K")) }, // a helper of a known backend
        { pid: 106, environ: environ({ PATH: "/bin" }) }, // named by a partial record, not marked: a recycled pid
        { pid: 107, environ: environ(markEnv(mark, "")) }, // named by a partial record, marked
        { pid: 108, port: 21005 + 3, environ: environ(markEnv(mark, "01J0000000000000000000000M", "gx1")) }, // spawned, agent killed before its record
      ],
      [21006, 21007],
    );
    const scan = await scanPortRange({
      host: "127.0.0.1",
      portMin: 21000,
      portMax: 21009,
      mark,
      knownPids: new Set(),
      knownIncarnations: new Set(["01J0000000000000000000000K"]),
      ownPorts: new Set([21007]),
      partials: [
        { file: "a.json", pid: 106, model: "ghost", address: "127.0.0.1:21008", detail: "partial" },
        { file: "b.json", pid: 107, model: "half", address: "127.0.0.1:21009", detail: "partial" },
      ],
      procRoot: root,
    });
    expect(scan.orphans.map((o) => [o.pid, o.address, o.model]).sort()).toEqual([
      [100, "127.0.0.1:21000", ""],
      [107, "127.0.0.1:21009", "half"],
      // The mark names its model: it counts for that model's exclusive groups until stopped.
      [108, "127.0.0.1:21008", "gx1"],
    ]);
    expect(scan.foreign.map((f) => [f.pid, f.address, f.detail])).toEqual([
      [101, "127.0.0.1:21001", "no Warden mark"],
      [102, "127.0.0.1:21002", "marked for node node-b"],
      [103, "127.0.0.1:21003", "marked for node node-a by another agent (another state dir)"],
      [104, "127.0.0.1:21004", "environment unreadable (not this agent's to inspect)"],
      // a socket whose owner cannot be found; the one on our own backend's port is taken to be that backend
      [0, "127.0.0.1:21006", "listening, held by a process this agent may not inspect"],
    ]);
    expect([...scan.heldPorts].sort()).toEqual([21000, 21001, 21002, 21003, 21004, 21006, 21008]);
  });
});
