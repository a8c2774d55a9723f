import type { Command } from "commander";
import { WardenError, invalidArgument } from "@warden/common";
import type { CliIo } from "./action-context.js";
import { exitCodeOf, exitCodes } from "./exit-codes.js";

const collect = (v: string, prev: string[]): string[] => [...prev, ...v.split(",").map((s) => s.trim()).filter((s) => s !== "")];

const help = `
Files (in --out): ca.pem, ca-key.pem, and <name>.pem + <name>-key.pem per certificate.
Keys are P-256, mode 0600, never overwritten. localhost, 127.0.0.1 and ::1 are
always in a coordinator's or agent's SANs; an agent certificate carries its node
id (URI urn:warden:node:<id>), which the coordinator checks on Register/Heartbeat;
a coordinator certificate carries URI urn:warden:coordinator, the only identity
an agent takes commands from (client certificates go to the coordinator only).
A coordinator certificate made by an older warden lacks it: issue a new one
  warden certs issue coordinator coordinator-2 --out certs --san coord.lan
point the coordinator's tls.cert/tls.key at it and restart the coordinator.
Needs openssl on PATH. Example, a coordinator and two agents:
  warden certs init --out certs --san coord.lan --san 10.0.0.5 --agent gpu-1 --agent gpu-2
  warden certs issue agent gpu-3 --out certs --san 10.0.0.9
`;

/** `warden certs init|issue`: the dev CA and certificates for mutual TLS (certs.ts does the work, loaded on use). */
export function certsCommand(program: Command, io: CliIo, setCode: (code: number) => void): void {
  const certs = program.command("certs").description("make a development CA and TLS certificates for a coordinator, its agents and an operator").addHelpText("after", help);
  const run = async (fn: () => Promise<string>): Promise<void> => {
    try {
      io.out.write(await fn());
      setCode(exitCodes.ok);
    } catch (err) {
      io.err.write(`warden certs: ${WardenError.from(err).rawMessage}\n`);
      setCode(exitCodeOf(err));
    }
  };
  certs
    .command("init")
    .description("create a CA (ca.pem, ca-key.pem), a coordinator certificate, one per --agent and an operator client certificate (admin)")
    .option("--out <dir>", "output directory (created 0700)", "certs")
    .option("--san <host|ip>", "a name or address the coordinator is reached at (repeatable, or comma-separated)", collect, [])
    .option("--agent <node-id>", "issue an agent certificate for this node id (repeatable, or comma-separated)", collect, [])
    .option("--agent-san <host|ip>", "names or addresses added to every agent certificate from this run", collect, [])
    .option("--days <n>", "CA validity in days (certificates: at most 398)", "3650")
    .action(async (o: { out: string; san: string[]; agent: string[]; agentSan: string[]; days: string }) => {
      await run(async () => {
        const { certsInit } = await import("./certs.js");
        const r = await certsInit({ out: o.out, days: Number(o.days), agents: o.agent, coordinatorSans: o.san, agentSans: o.agentSan });
        return [`CA        ${r.caCert}  (key ${r.caKey}: keep it off the agents)`, ...r.issued.map((c) => `${c.kind.padEnd(11)} ${c.name}: ${c.cert}  ${c.key}`), ""].join("\n");
      });
    });
  certs
    .command("issue")
    .description("issue one more certificate signed by the CA in --out: coordinator <name>, agent <node-id> or client <name>")
    .argument("<kind>", "coordinator | agent | client")
    .argument("<name>", "the certificate's name; an agent's node id")
    .option("--out <dir>", "the directory holding ca.pem and ca-key.pem", "certs")
    .option("--san <host|ip>", "a name or address it is reached at (repeatable, or comma-separated)", collect, [])
    .option("--days <n>", "validity in days", "398")
    .action(async (kind: string, name: string, o: { out: string; san: string[]; days: string }) => {
      await run(async () => {
        const { certsIssue } = await import("./certs.js");
        if (kind !== "coordinator" && kind !== "agent" && kind !== "client") throw invalidArgument("<kind>", `must be coordinator, agent or client, got "${kind}"`);
        const c = await certsIssue({ out: o.out, kind, name, sans: o.san, days: Number(o.days) });
        return `${c.kind} ${c.name}: ${c.cert}  ${c.key}\n`;
      });
    });
}
