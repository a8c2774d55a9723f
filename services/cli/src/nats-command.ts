import type { Command } from "commander";
import { WardenError } from "@warden/common";
import type { CliIo } from "./action-context.js";
import { exitCodeOf, exitCodes } from "./exit-codes.js";

const collect = (v: string, prev: string[]): string[] => [...prev, ...v.split(",").map((s) => s.trim()).filter((s) => s !== "")];

const help = `
Run once before the coordinators start, and again to change the limits, as a
NATS user allowed to create streams and consumers (the "provisioner" of
services/coordinator/deploy/nats-server.example.conf). The coordinator's own
user then needs no such right: it only publishes events and checks the
stream's configuration on every connect, warning (and counting it in
warden_audit_stream_drift) when someone changed it.
Password from NATS_PASSWORD (with --user), token from NATS_TOKEN. Example:
  NATS_PASSWORD=... warden nats provision --url tls://nats.internal:4222 --user provisioner --durable auditor
`;

/** `warden nats provision`: the JetStream objects Warden uses, made by a user the coordinator is not. */
export function natsCommand(program: Command, io: CliIo, setCode: (code: number) => void): void {
  const nats = program.command("nats").description("set up the NATS JetStream objects Warden uses (audit stream, readers' durables, HA buckets)");
  nats
    .command("provision")
    .description("create or update the audit stream and the readers' durable consumers (and with --ha the HA buckets and journal)")
    .addHelpText("after", help)
    .requiredOption("--url <url[,url…]>", "NATS server URL(s)")
    .option("--user <user>", "NATS user (password from NATS_PASSWORD)")
    .option("--creds <file>", "NATS creds file")
    .option("--token <token>", "NATS token (or NATS_TOKEN)")
    .option("--inbox-prefix <prefix>", "where API replies arrive (the user may subscribe there)", "_INBOX_provisioner")
    .option("--stream <name>", "audit stream name", "WARDEN_EVENTS")
    .option("--max-age <duration>", "how long events are kept (at least 1h)", "7d")
    .option("--max-bytes <n>", "size cap in bytes, oldest events go first (-1: unlimited, else at least 1048576)", "-1")
    .option("--replicas <n>", "copies of each stream (3 in an HA cluster)", "1")
    .option("--durable <name>", "a reader's durable consumer to create, e.g. auditor (repeatable, or comma-separated)", collect, [])
    .option("--ha", "also the HA lease bucket, state bucket and journal stream", false)
    .option("--timeout <duration>", "deadline for the whole run", "60s")
    .action(async (o: { url: string; user?: string; creds?: string; token?: string; inboxPrefix: string; stream: string; maxAge: string; maxBytes: string; replicas: string; durable: string[]; ha: boolean; timeout: string }) => {
      try {
        const { natsProvision } = await import("./nats-provision.js");
        for (const line of await natsProvision(o, io.env)) io.out.write(`${line}\n`);
        setCode(exitCodes.ok);
      } catch (err) {
        io.err.write(`warden nats provision: ${WardenError.from(err).rawMessage}\n`);
        setCode(exitCodeOf(err));
      }
    });
}
