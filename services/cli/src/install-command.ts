import type { Command } from "commander";
import { WardenError, invalidArgument } from "@warden/common";
import type { CliIo } from "./action-context.js";
import { exitCodeOf, exitCodes } from "./exit-codes.js";

const collect = (v: string, prev: string[]): string[] => [...prev, ...v.split(",").map((s) => s.trim()).filter((s) => s !== "")];

const help = `
Run as root on each machine, from the warden you installed (npm install -g ./warden-<version>.tgz):
  sudo warden install coordinator --san coord.lan
  sudo warden install agent --coordinator coord.lan:50051 --node-id gpu-1 --advertise 10.0.0.5:7443
It creates the service user (useradd --system, unless it exists), <prefix>/etc/warden with the
config (written once, never overwritten), certificates in <prefix>/etc/warden/certs (the service's
key root:<user's group> 0640: it reads, cannot replace; the CA and admin keys root 0600), the state
dir (<prefix>/var/lib/warden or warden-agent, 0700 owned by the user) and the systemd unit in
<prefix>/etc/systemd/system, which runs this node binary and this warden by absolute path (no PATH
lookup, so an nvm node works; run install again after moving either) and joins the video/render
groups only where they exist. An agent's certificate is issued from the CA key when it is in the
certs dir (coordinator and agent on one machine); elsewhere copy ca.pem, <node-id>.pem and
<node-id>-key.pem from \`warden certs issue agent <node-id>\` on the coordinator's machine first.
Running it again changes only what differs and says so for every file.`;

/** `warden install coordinator|agent` (install.ts does the work, loaded on use). */
export function installCommand(program: Command, io: CliIo, setCode: (code: number) => void): void {
  program
    .command("install")
    .description("set up a coordinator or an agent as a systemd service on this machine: user, /etc/warden, certificates, state dir, unit")
    .argument("<role>", "coordinator | agent")
    .option("--prefix <dir>", "root of every file written (a package build or a test: a temp dir)", "/")
    .option("--user <name>", "the service user (created with useradd --system unless it exists)", "warden")
    .option("--coordinator <host:port[,host:port…]>", "agent: the coordinator's address as this node reaches it (HA: all members, comma-separated)")
    .option("--node-id <id>", "agent: this node's id (default: the host name)")
    .option("--listen <host:port>", "the service's listen address (default: coordinator 0.0.0.0:50051, agent 0.0.0.0:7443)")
    .option("--advertise <host:port>", "agent: the address the coordinator dials (default: <host name>:<listen port>)")
    .option("--san <host|ip>", "a name or address this service's certificate is valid for (repeatable, or comma-separated)", collect, [])
    .addHelpText("after", help)
    .action(async (role: string, o: { prefix: string; user: string; coordinator?: string; nodeId?: string; listen?: string; advertise?: string; san: string[] }) => {
      try {
        if (role !== "coordinator" && role !== "agent") throw invalidArgument("<role>", `must be coordinator or agent, got "${role.slice(0, 40)}"`);
        const { install } = await import("./install.js");
        const lines = await install({ role, prefix: o.prefix, user: o.user, sans: o.san, ...(o.coordinator === undefined ? {} : { coordinator: o.coordinator }), ...(o.nodeId === undefined ? {} : { nodeId: o.nodeId }), ...(o.listen === undefined ? {} : { listen: o.listen }), ...(o.advertise === undefined ? {} : { advertise: o.advertise }) });
        io.out.write(`${lines.join("\n")}\n`);
        setCode(exitCodes.ok);
      } catch (err) {
        io.err.write(`warden install: ${WardenError.from(err).rawMessage}\n`);
        setCode(exitCodeOf(err));
      }
    });
}
