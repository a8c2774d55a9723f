/**
 * Example audit consumer: appends every Warden event to a JSONL file, one JSON
 * object per line (`eventToJson`: the protobuf JSON plus a `type` field).
 *
 *   node --import tsx packages/audit/src/examples/jsonl-audit-consumer.ts \
 *     --nats nats://127.0.0.1:4222 --out audit.jsonl [--durable warden-jsonl] \
 *     [--type eviction.started --type eviction.failed] [--node gpu-1] [--model llama-8b] \
 *     [--since 2026-01-01T00:00:00Z | --from-seq 1234] \
 *     [--user U --password P | --token T | --creds file.creds]
 *
 * Guarantees: a line is written and fsync'd before its event is acked, so a
 * crash never loses an event; on restart the ids in the file's last lines seed
 * the de-duplication set, so the event that was being written when it crashed
 * is not written twice. SIGINT/SIGTERM stop it cleanly.
 */
import { open, readFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { eventToJson, parseEventType, type EventFilter } from "@warden/events";
import { connectAudit, type NatsCredentials } from "../nats-connection.js";
import { subscribeAuditEvents, type AuditSubscribeStart } from "../audit-subscriber.js";

const usage = `Usage: jsonl-audit-consumer --nats URL --out FILE [options]

  --nats URL          NATS server URL (repeatable for a cluster)
  --out FILE          JSONL file to append to (created if missing)
  --durable NAME      durable consumer name; reuse it to resume (default warden-jsonl)
  --stream NAME       JetStream stream (default WARDEN_EVENTS)
  --type TYPE         only this event type (repeatable), e.g. eviction.started
  --node ID           only events of this node
  --model ID          only events of this model
  --since ISO-TIME    a new durable starts at this time
  --from-seq N        a new durable starts at this stream sequence
  --user U --password P | --token T | --creds FILE   NATS credentials
  --help              this text
`;

const seedLines = 10_000;

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      nats: { type: "string", multiple: true },
      out: { type: "string" },
      durable: { type: "string", default: "warden-jsonl" },
      stream: { type: "string" },
      type: { type: "string", multiple: true },
      node: { type: "string" },
      model: { type: "string" },
      since: { type: "string" },
      "from-seq": { type: "string" },
      user: { type: "string" },
      password: { type: "string" },
      token: { type: "string" },
      creds: { type: "string" },
      help: { type: "boolean", default: false },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(usage);
    return;
  }
  const servers = values.nats ?? [];
  const out = values.out;
  if (servers.length === 0 || out === undefined) {
    process.stderr.write(usage);
    process.exitCode = 2;
    return;
  }
  let credentials: NatsCredentials = { kind: "none" };
  if (values.creds !== undefined) credentials = { kind: "creds-file", path: values.creds };
  else if (values.token !== undefined) credentials = { kind: "token", token: values.token };
  else if (values.user !== undefined) credentials = { kind: "user-password", user: values.user, password: values.password ?? "" };

  let start: AuditSubscribeStart = { kind: "all" };
  if (values.since !== undefined) start = { kind: "time", at: new Date(values.since) };
  if (values["from-seq"] !== undefined) start = { kind: "sequence", streamSequence: Number(values["from-seq"]) };

  const filter: EventFilter = {
    ...(values.type === undefined ? {} : { types: values.type.map((t) => parseEventType(t, "--type")) }),
    ...(values.node === undefined ? {} : { nodeId: values.node }),
    ...(values.model === undefined ? {} : { model: values.model }),
  };

  await cutTornLine(out);
  const seen = await lastIds(out, seedLines);
  const ctl = new AbortController();
  for (const sig of ["SIGINT", "SIGTERM"] as const) process.once(sig, () => { ctl.abort(); });

  const nc = await connectAudit({ servers, credentials, name: "warden-jsonl-audit", waitOnFirstConnect: true }, ctl.signal);
  const file = await open(out, "a");
  let written = 0;
  try {
    for await (const d of subscribeAuditEvents(nc, {
      durable: values.durable,
      ...(values.stream === undefined ? {} : { stream: values.stream }),
      filter,
      start,
      seenEventIds: seen,
      signal: ctl.signal,
      onInvalid: (info) => process.stderr.write(`skipping message ${info.streamSequence} on ${info.subject}: ${info.error.message}\n`),
    })) {
      await file.write(`${JSON.stringify(eventToJson(d.event))}\n`);
      // Durable before the ack, which happens when the loop asks for the next event.
      await file.datasync();
      written++;
    }
  } finally {
    await file.close();
    await nc.close();
    process.stderr.write(`wrote ${written} events to ${out}\n`);
  }
}

/** A crash mid-write can leave a partial last line; cut it so the next line starts clean. */
async function cutTornLine(path: string): Promise<void> {
  let text: Buffer;
  try {
    text = await readFile(path);
  } catch {
    return;
  }
  if (text.length === 0 || text[text.length - 1] === 0x0a) return;
  const fh = await open(path, "r+");
  try {
    await fh.truncate(text.lastIndexOf(0x0a) + 1);
    await fh.datasync();
  } finally {
    await fh.close();
  }
}

/** Ids in the last `n` lines of an existing audit file (a torn last line is ignored). */
async function lastIds(path: string, n: number): Promise<string[]> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch {
    return [];
  }
  const ids: string[] = [];
  for (const line of text.split("\n").slice(-n - 1)) {
    try {
      const id = (JSON.parse(line) as { id?: unknown }).id;
      if (typeof id === "string") ids.push(id);
    } catch {
      // empty or torn line
    }
  }
  return ids;
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
  process.exitCode = 1;
});
