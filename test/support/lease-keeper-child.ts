/**
 * One LeaseKeeper in its own process, for tests that kill -9 or SIGSTOP a
 * coordinator's lease. Configured by the JSON in $WARDEN_LEASE_CHILD; writes one
 * JSON line per event to stdout ({"ev":"leader"|"follower"|"act"|"ready", …,
 * "wallMs"}). "act" is printed every `actEveryMs` while `isLeader()` says so:
 * it stands for a command the coordinator would send.
 */
import { connectAudit } from "@warden/audit";
import type { LogMeta, Logger } from "@warden/common";
import { leaseConfig } from "@warden/lease";
import { openLeaseBucket } from "../../services/coordinator/src/ha/lease-bucket.js";
import { LeaseKeeper } from "../../services/coordinator/src/ha/lease-keeper.js";

export interface LeaseChildConfig {
  readonly servers: readonly string[];
  readonly bucket: string;
  readonly holder: string;
  readonly actEveryMs: number;
  /** Lease timing overrides (the defaults otherwise); a short lease makes more takeovers in a bounded test. */
  readonly timing?: { readonly leaseMs: number; readonly renewMs: number; readonly marginMs: number; readonly retryMs: number };
}

const cfg = JSON.parse(process.env["WARDEN_LEASE_CHILD"] ?? "") as LeaseChildConfig;
const emit = (ev: string, fields: Record<string, unknown> = {}): void => {
  process.stdout.write(JSON.stringify({ ev, ...fields, wallMs: Date.now() }) + "\n");
};

const nc = await connectAudit({ servers: cfg.servers, name: cfg.holder, reconnectTimeWaitMs: 100, connectTimeoutMs: 2_000 });
// Started while a server is down, the bucket's stream may have no leader yet: retry, as a member's start does.
process.on("unhandledRejection", (err) => {
  process.stderr.write(`${cfg.holder}: unhandled rejection: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(70);
});
let kv: Awaited<ReturnType<typeof openLeaseBucket>> | undefined;
for (let attempt = 0; kv === undefined; attempt++) {
  try {
    kv = await openLeaseBucket(nc, { bucket: cfg.bucket, replicas: 3 });
  } catch (err) {
    if (attempt >= 60) throw err;
    await new Promise((r) => setTimeout(r, 500));
  }
}
// Every keeper log line (debug included) as an event: the account of a member that does not lead again.
const logAs = (level: string) => (msg: string, meta?: LogMeta): void => {
  emit("log", { level, msg, ...(meta ?? {}) });
};
const log: Logger = { debug: logAs("debug"), info: logAs("info"), warn: logAs("warn"), error: logAs("error"), child: () => log };
const keeper = LeaseKeeper.start({
  kv,
  log,
  config: leaseConfig(cfg.holder, cfg.timing ?? {}),
  ...(cfg.timing === undefined ? {} : { opTimeoutMs: Math.min(1_000, cfg.timing.leaseMs - cfg.timing.marginMs - 1) }),
  onChange: (c) => {
    // `from`: the revision this term took the key from (0: created it), so a checker sees two takeovers of one revision.
    if (c.kind === "leader") emit("leader", { epoch: c.epoch, from: c.previous?.revision ?? 0 });
    else emit("follower", { epoch: c.epoch, reason: c.reason });
  },
});
const act = setInterval(() => {
  const epoch = keeper.epoch();
  if (epoch !== undefined) emit("act", { epoch });
}, cfg.actEveryMs);
emit("ready");

// The test holds our stdin: when it goes away (even by kill -9), so do we, instead of reconnecting forever.
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();

process.once("SIGTERM", () => {
  clearInterval(act);
  void keeper
    .stop()
    .then(() => nc.close())
    .finally(() => process.exit(0));
});
