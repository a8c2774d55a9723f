import { runCoordinator, type RunCoordinatorOptions } from "@warden/coordinator";
import { connectAudit, subscribeAuditEvents, type AuditSubscribeStart, type NatsCredentials } from "@warden/audit";
import { eventToJson, parseEventType } from "@warden/events";
import { invalidArgument } from "@warden/common";
import { parseAddr } from "./addr.js";
import { prettyLogStream } from "./pretty-log.js";
import { eventLine } from "./admin-actions.js";
import type { CliIo } from "./action-context.js";
import { simulate, type SimulateOptions } from "./whatif.js";

const logLevels = ["trace", "debug", "info", "warn", "error", "fatal", "silent"];

/** `warden up` / `warden coordinator` options, checked before anything starts (a bad flag is exit 2 naming it). */
function serveOptions(io: CliIo, o: Record<string, unknown>, up: boolean): RunCoordinatorOptions {
  if (typeof o.listen === "string") parseAddr(o.listen, "--listen");
  if (typeof o.metrics === "string") parseAddr(o.metrics, "--metrics");
  if (typeof o.http === "string" && o.http !== "off") parseAddr(o.http, "--http");
  const level = typeof o.logLevel === "string" ? o.logLevel : "info";
  if (!logLevels.includes(level)) throw invalidArgument("--log-level", `expected one of ${logLevels.join(", ")}, got "${level}"`);
  // Readable lines for a person at a terminal, JSON for a pipe or a log collector.
  const pretty = o.logPretty === true || (o.logJson !== true && (io.out as { isTTY?: boolean }).isTTY === true);
  return {
    config: o.config as string | undefined,
    listen: o.listen as string | undefined,
    stateDir: o.stateDir as string | undefined,
    metricsListen: o.metrics as string | undefined,
    httpListen: o.http as string | undefined,
    httpDefault: up ? "127.0.0.1:8080" : undefined,
    up,
    logLevel: level,
    logDestination: pretty ? prettyLogStream(io.err) : undefined,
    // JSON logs own stdout (one record per line for a collector); the banner, for a person, goes to stderr
    // then. --check-config starts nothing and logs nothing: its report is the command's output, on stdout.
    out: pretty || o.checkConfig === true ? io.out : io.err,
    checkConfig: o.checkConfig === true,
    quietBanner: io.env.WARDEN_QUIET_BANNER === "1",
    insecure: o.insecure === true,
    tlsCert: o.tlsCert as string | undefined,
    tlsKey: o.tlsKey as string | undefined,
    tlsCa: o.tlsCa as string | undefined,
    ha: o.ha === true,
    natsUrl: o.natsUrl as string | undefined,
  };
}

/** The long-running commands, kept apart from the admin commands so tests of the latter stay light. */
export function runners(io: CliIo) {
  return {
    up: (o: Record<string, unknown>) => runCoordinator(serveOptions(io, o, true)),
    simulate: (o: SimulateOptions) => simulate(o, () => performance.now()),
    coordinator: (o: Record<string, unknown>) => runCoordinator(serveOptions(io, o, false)),
    /** `warden agent`: runs the agent's own entry point in this process (one pid, signals reach it). */
    agent: async (args: string[]): Promise<number> => {
      process.argv = [process.argv[0] ?? "node", "warden-agent", ...args];
      await import("../../agent/src/main.js");
      // main.ts exits the process itself when it is done.
      return new Promise<number>(() => {});
    },
    natsEvents: async (o: Record<string, unknown>, g: { json: boolean }): Promise<number> => {
      const credentials: NatsCredentials =
        typeof o.creds === "string"
          ? { kind: "creds-file", path: o.creds }
          : typeof o.token === "string" || io.env.NATS_TOKEN !== undefined
            ? { kind: "token", token: (o.token as string | undefined) ?? io.env.NATS_TOKEN ?? "" }
            : typeof o.user === "string"
              ? { kind: "user-password", user: o.user, password: io.env.NATS_PASSWORD ?? "" }
              : { kind: "none" };
      let start: AuditSubscribeStart = { kind: "all" };
      if (typeof o.since === "string") {
        const at = new Date(o.since);
        if (Number.isNaN(at.getTime())) throw invalidArgument("--since", `expected an ISO 8601 time, got "${o.since}"`);
        start = { kind: "time", at };
      }
      if (typeof o.fromSeq === "string") {
        const n = Number(o.fromSeq);
        if (!Number.isInteger(n) || n < 1) throw invalidArgument("--from-seq", `expected a stream sequence >= 1, got "${o.fromSeq}"`);
        start = { kind: "sequence", streamSequence: n };
      }
      const types = ((o.type as string[] | undefined) ?? []).map((t, i) => parseEventType(t, `--type[${String(i)}]`));
      const nc = await connectAudit({ servers: o.nats as string, credentials, name: "warden-cli-events" });
      const ctl = new AbortController();
      process.once("SIGINT", () => {
        ctl.abort();
      });
      try {
        for await (const d of subscribeAuditEvents(nc, {
          durable: o.durable as string,
          filter: { types, ...(typeof o.node === "string" ? { nodeId: o.node } : {}), ...(typeof o.model === "string" ? { model: o.model } : {}) },
          start,
          signal: ctl.signal,
        })) {
          io.out.write(`${g.json ? JSON.stringify({ ...eventToJson(d.event), streamSequence: d.streamSequence }) : `#${String(d.streamSequence)} ${eventLine(d.event)}`}\n`);
        }
      } finally {
        await nc.close();
      }
      return 0;
    },
  };
}
