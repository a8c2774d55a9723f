/**
 * `warden nats provision --ha`, as its own process against a real nats-server:
 * the audit stream, a reader's durable, and the HA lease bucket, state bucket
 * and journal stream, with the configurations the coordinator's own openers
 * use; a second run changes nothing it need not (the HA objects are only
 * created when missing) and reports the durable as existing.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { NatsConnection } from "@nats-io/transport-node";
import { RetentionPolicy, StorageType, jetstreamManager } from "@nats-io/jetstream";
import { connectAudit } from "@warden/audit";
import { startNatsServer, type NatsServerHandle } from "./support/nats-server.js";

const cliMain = fileURLToPath(new URL("../services/cli/src/main.ts", import.meta.url));
const repoRoot = fileURLToPath(new URL("..", import.meta.url));
let server: NatsServerHandle;
let nc: NatsConnection;

beforeAll(async () => {
  server = await startNatsServer();
  nc = await connectAudit({ servers: server.url });
});
afterAll(async () => {
  await nc.close();
  await server.dispose();
});

async function provision(...args: string[]): Promise<{ code: number | null; out: string; err: string }> {
  const child = spawn(process.execPath, ["--import", "tsx", cliMain, "nats", "provision", "--url", server.url, ...args], { cwd: repoRoot, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  child.stdout.setEncoding("utf8").on("data", (d: string) => (out += d));
  child.stderr.setEncoding("utf8").on("data", (d: string) => (err += d));
  const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
  return { code, out, err };
}

describe("warden nats provision", () => {
  it("creates the audit stream, a durable and the HA buckets and journal, and a second run changes only the stream's limits", async () => {
    const first = await provision("--durable", "auditor", "--ha", "--max-age", "30d");
    expect(first.err).toBe("");
    expect(first.code).toBe(0);
    expect(first.out.trim().split("\n").map((l) => l.split(":")[0])).toEqual([
      "stream  WARDEN_EVENTS",
      "durable WARDEN_EVENTS/auditor",
      "bucket  warden-leader (stream KV_warden-leader)",
      "bucket  warden-state (stream KV_warden-state)",
      "stream  WARDEN_JOURNAL",
    ]);
    const jsm = await jetstreamManager(nc);
    const audit = (await jsm.streams.info("WARDEN_EVENTS")).config;
    expect([audit.subjects, audit.storage, audit.retention, audit.max_age, audit.max_msgs]).toEqual([["warden.events.>"], StorageType.File, RetentionPolicy.Limits, 30 * 86_400 * 1e9, -1]);
    expect((await jsm.consumers.info("WARDEN_EVENTS", "auditor")).config.filter_subject).toBe("warden.events.>");
    const lease = (await jsm.streams.info("KV_warden-leader")).config;
    expect([lease.max_msgs_per_subject, lease.allow_direct]).toEqual([1, false]);
    const journal = (await jsm.streams.info("WARDEN_JOURNAL")).config;
    expect([journal.subjects, journal.deny_delete]).toEqual([["warden.journal"], true]);

    const second = await provision("--durable", "auditor", "--ha");
    expect(second.code).toBe(0);
    expect(second.out).toMatch(/^stream {2}WARDEN_EVENTS: updated/m);
    expect(second.out).toMatch(/^durable WARDEN_EVENTS\/auditor: exists/m);
    expect((await jsm.streams.info("WARDEN_EVENTS")).config.max_age).toBe(7 * 86_400 * 1e9);
  });

  it("refuses limits under the floors, naming the flag, before connecting; no server is exit 3", async () => {
    const before = (await (await jetstreamManager(nc)).streams.info("WARDEN_EVENTS")).config;
    const age = await provision("--max-age", "10m");
    expect([age.code, age.err]).toEqual([2, "warden nats provision: --max-age: must be at least 1h (an audit trail kept shorter is drift), got 10m\n"]);
    const bytes = await provision("--max-bytes", "4096");
    expect(bytes.code).toBe(2);
    expect(bytes.err).toMatch(/--max-bytes: must be -1 \(unlimited\) or at least 1048576/);
    expect((await (await jetstreamManager(nc)).streams.info("WARDEN_EVENTS")).config).toEqual(before);
    // No server there: exit 3 (try again later), the reason in one line.
    const child = spawn(process.execPath, ["--import", "tsx", cliMain, "nats", "provision", "--url", "nats://127.0.0.1:1", "--timeout", "5s"], { cwd: repoRoot, stdio: ["ignore", "ignore", "pipe"] });
    let err = "";
    child.stderr.setEncoding("utf8").on("data", (d: string) => (err += d));
    expect(await new Promise<number | null>((resolve) => child.once("exit", resolve))).toBe(3);
    expect(err).toMatch(/^warden nats provision: cannot connect to NATS at nats:\/\/127\.0\.0\.1:1: connection refused/);
  });
});
