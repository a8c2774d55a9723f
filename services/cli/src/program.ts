import { Command, CommanderError, Option } from "commander";
import { toJson, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import type {
  EventSchema} from "@warden/proto";
import {
  AdminService,
  ExplainPlacementResponseSchema,
  GetPolicyResponseSchema,
  InferenceService,
  ListModelsResponseSchema,
  DeclareNodeLostResponseSchema,
  ListNodesResponseSchema,
  LoadModelResponseSchema,
  NodeSchema,
  PlacementDecision,
  UnloadOutcome,
  type PolicyPatch,
} from "@warden/proto";
import { createClient, type Client } from "@warden/grpc";
import { Code, WardenError, formatDurationMs, invalidArgument, parseDurationMs } from "@warden/common";
import { eventToJson, eventTypeOf, parseEventType } from "@warden/events";
import { errorLine, exitCodeHelp, exitCodeOf, exitCodes } from "./exit-codes.js";
import { modelsTable, nodesTable, table } from "./render.js";

/** Where the CLI writes; injectable so tests can capture it. */
export interface CliIo {
  readonly out: NodeJS.WritableStream;
  readonly err: NodeJS.WritableStream;
  readonly env: Readonly<Record<string, string | undefined>>;
  /** Whether stderr is a terminal (progress lines are redrawn in place). */
  readonly interactive: boolean;
}

interface GlobalOpts {
  addr: string;
  json: boolean;
  timeout: string;
}

const defaultAddr = "127.0.0.1:50051";

function json<T extends DescMessage>(schema: T, msg: MessageShape<T>): string {
  return JSON.stringify(toJson(schema, msg, { alwaysEmitImplicit: false }), null, 2);
}

/**
 * Builds the `warden` command tree. Every command has `--help`; admin
 * commands take `--addr` (or WARDEN_ADDR) and `--json`; errors print one line
 * and exit with a code that means something (see exit-codes.ts).
 */
export function buildProgram(io: CliIo, runners: { up: (o: Record<string, unknown>) => Promise<number>; coordinator: (o: Record<string, unknown>) => Promise<number>; agent: (args: string[]) => Promise<number>; natsEvents: (o: Record<string, unknown>, g: GlobalOpts) => Promise<number> }): { program: Command; exitCode: () => number } {
  let code: number = exitCodes.ok;
  const program = new Command("warden")
    .description("Warden: a control plane for GPU model backends that never forgets a backend holding memory.")
    .configureOutput({ writeOut: (s) => io.out.write(s), writeErr: (s) => io.err.write(s) })
    .exitOverride()
    .addHelpText("after", `\n${exitCodeHelp}\n`)
    .showHelpAfterError("(run with --help for usage)");

  const withGlobal = (c: Command): Command =>
    c
      .addOption(new Option("--addr <host:port>", "Warden admin/inference address").env("WARDEN_ADDR").default(defaultAddr))
      .option("--json", "machine-readable JSON output", false)
      .option("--timeout <duration>", "deadline for the call (e.g. 30s, 10m)", "10m");

  const opts = (c: Command): GlobalOpts => c.opts<GlobalOpts>();
  const deadline = (g: GlobalOpts): number => parseDurationMs(g.timeout, "--timeout");
  const admin = (g: GlobalOpts): Client<typeof AdminService> => createClient(AdminService, g.addr);
  const inference = (g: GlobalOpts): Client<typeof InferenceService> => createClient(InferenceService, g.addr);
  const print = (s: string): void => {
    io.out.write(s.endsWith("\n") ? s : `${s}\n`);
  };

  /** Runs one admin action with a one-line error and a meaningful exit code. */
  const act =
    <A extends unknown[]>(fn: (g: GlobalOpts, ...args: A) => Promise<number | undefined>) =>
    async (...args: A): Promise<void> => {
      const cmd = args[args.length - 1] as Command;
      const g = opts(cmd);
      try {
        code = (await fn(g, ...args)) ?? exitCodes.ok;
      } catch (err) {
        io.err.write(`${errorLine(err, g.addr)}\n`);
        code = exitCodeOf(err);
      }
    };

  /** A progress line for work that takes more than a second (loads on demand). */
  const progress = (label: string): (() => void) => {
    const start = Date.now();
    let shown = false;
    const timer = setInterval(() => {
      shown = true;
      const line = `${label} … ${formatDurationMs(Date.now() - start)}`;
      io.err.write(io.interactive ? `\r${line}` : `${line}\n`);
    }, 1_000);
    return () => {
      clearInterval(timer);
      if (shown && io.interactive) io.err.write("\n");
    };
  };

  program
    .command("up")
    .description("run a coordinator with an embedded agent and the built-in demo config (three backend-sim models); Ctrl-C stops every backend it started")
    .option("--config <file>", "YAML config instead of the built-in demo")
    .option("--listen <host:port>", `admin/inference address (default ${defaultAddr}, or the config's)`)
    .option("--state-dir <dir>", "journal and agent records (default .warden, or the config's)")
    .option("--metrics <host:port>", "serve Prometheus metrics at http://HOST:PORT/metrics")
    .option("--log-level <level>", "pino log level", "info")
    .option("--log-pretty", "human-readable logs on stderr instead of JSON on stdout", false)
    .action(async (o: Record<string, unknown>) => {
      code = await runners.up(o);
    });

  program
    .command("coordinator")
    .description("run a coordinator (no demo config; backends keep running when it stops)")
    .requiredOption("--config <file>", "YAML config (see README)")
    .option("--listen <host:port>", "overrides the config's listen address")
    .option("--state-dir <dir>", "overrides the config's stateDir")
    .option("--metrics <host:port>", "serve Prometheus metrics at http://HOST:PORT/metrics")
    .option("--log-level <level>", "pino log level", "info")
    .option("--log-pretty", "human-readable logs on stderr instead of JSON on stdout", false)
    .action(async (o: Record<string, unknown>) => {
      code = await runners.coordinator(o);
    });

  program
    .command("agent")
    .description("run a node agent that registers with a coordinator")
    .requiredOption("--config <file>", "agent YAML config (see services/agent/README.md)")
    .option("--coordinator <host:port>", "coordinator NodeService address")
    .option("--listen <host:port>", "AgentService address (overrides the config)")
    .option("--stop-backends-on-exit", "on SIGTERM/SIGINT stop every backend (default: leave them running for adoption)", false)
    .option("--metrics <host:port>", "serve Prometheus metrics at http://HOST:PORT/metrics")
    .action(async (o: { config: string; coordinator?: string; listen?: string; stopBackendsOnExit: boolean; metrics?: string }) => {
      const args = ["--config", o.config];
      if (o.coordinator !== undefined) args.push("--coordinator", o.coordinator);
      if (o.listen !== undefined) args.push("--listen", o.listen);
      if (o.stopBackendsOnExit) args.push("--stop-backends-on-exit");
      if (o.metrics !== undefined) args.push("--metrics", o.metrics);
      code = await runners.agent(args);
    });

  const models = program.command("models").description("list, load and unload models");
  withGlobal(models.command("ls").description("every instance: loaded, loading, freed, pending eviction, leftover, orphan").option("--node <id>", "only this node")).action(
    act(async (g, o: { node?: string }) => {
      const r = await admin(g).listModels({ nodeId: o.node ?? "" }, { timeoutMs: deadline(g) });
      print(g.json ? json(ListModelsResponseSchema, r) : modelsTable(r.instances));
      return undefined;
    }),
  );
  withGlobal(models.command("load").description("load a model (or return the loaded instance)").argument("<model>").option("--node <id>", "place on this node")).action(
    act(async (g, model: string, o: { node?: string }) => {
      const done = progress(`loading ${model}`);
      try {
        const r = await admin(g).loadModel({ model, nodeId: o.node ?? "" }, { timeoutMs: deadline(g) });
        print(g.json ? json(LoadModelResponseSchema, r) : `loaded ${model} on ${r.instance?.nodeId ?? "?"} at ${r.instance?.address ?? "?"} (incarnation ${r.instance?.incarnation ?? "?"})`);
      } finally {
        done();
      }
      return undefined;
    }),
  );
  withGlobal(
    models
      .command("unload")
      .description("unload a model and report the real outcome")
      .argument("<model>")
      .option("--force", "skip the busy wait and Free; SIGKILL at once", false)
      .option("--stop-timeout <duration>", "bounds lock + busy wait + Free", "30s"),
  ).action(
    act(async (g, model: string, o: { force: boolean; stopTimeout: string }) => {
      const r = await admin(g).unloadModel({ model, force: o.force, stopTimeoutMs: BigInt(parseDurationMs(o.stopTimeout, "--stop-timeout")) }, { timeoutMs: deadline(g) });
      const outcome = UnloadOutcome[r.outcome].toLowerCase().replace(/_/g, "-");
      if (g.json) print(JSON.stringify({ model, outcome, error: r.error }));
      else print(`${model}: ${outcome}${r.error === "" ? "" : ` (${r.error})`}`);
      return r.outcome === UnloadOutcome.STOPPED || r.outcome === UnloadOutcome.NOT_LOADED ? exitCodes.ok : exitCodes.incomplete;
    }),
  );

  const nodes = program.command("nodes").description("list, drain and undrain nodes; declare an unreachable node lost");
  withGlobal(nodes.command("ls").description("registered nodes with health, drain progress and memory")).action(
    act(async (g) => {
      const r = await admin(g).listNodes({}, { timeoutMs: deadline(g) });
      print(g.json ? json(ListNodesResponseSchema, r) : nodesTable(r.nodes));
      return undefined;
    }),
  );
  withGlobal(nodes.command("drain").description("stop placing on a node and evict its instances (pinned ones too)").argument("<node>").option("--force", "force-stop busy instances", false)).action(
    act(async (g, node: string, o: { force: boolean }) => {
      const r = await admin(g).drainNode({ nodeId: node, force: o.force }, { timeoutMs: deadline(g) });
      print(g.json && r.node !== undefined ? json(NodeSchema, r.node) : `draining ${node}: ${String(r.node?.drainRemaining ?? 0)} instance(s) to evict`);
      return undefined;
    }),
  );
  withGlobal(nodes.command("undrain").description("allow placements on a node again").argument("<node>")).action(
    act(async (g, node: string) => {
      const r = await admin(g).undrainNode({ nodeId: node }, { timeoutMs: deadline(g) });
      print(g.json && r.node !== undefined ? json(NodeSchema, r.node) : `${node} accepts placements again`);
      return undefined;
    }),
  );

  withGlobal(
    nodes
      .command("lost")
      .summary("declare an unreachable node lost now (an operator's word)")
      .description("declare an unreachable node lost now (an operator's audited word, instead of waiting for nodeLostAfter): its instances become leftovers there, stopped should it come back, and their models may be placed elsewhere. A ready node is refused (exit 7): drain it instead. Already lost: exit 0, nothing changes")
      .argument("<node>")
      .option("--reason <text>", "why, recorded in the node.lost audit event"),
  ).action(
    act(async (g, node: string, o: { reason?: string }) => {
      const r = await admin(g).declareNodeLost({ nodeId: node, reason: o.reason ?? "" }, { timeoutMs: deadline(g) });
      if (g.json) print(json(DeclareNodeLostResponseSchema, r));
      else if (r.wasAlreadyLost) print(`${node} was already lost; nothing changed`);
      else print(`${node} declared lost: ${String(r.node?.instanceCount ?? 0)} instance(s) still accounted there as leftovers (stopped should it come back); their models may be placed elsewhere`);
      return undefined;
    }),
  );

  const policy = program.command("policy").description("show or change the live eviction policy");
  withGlobal(policy.command("get").description("the live policy")).action(
    act(async (g) => {
      const r = await admin(g).getPolicy({}, { timeoutMs: deadline(g) });
      if (g.json) print(json(GetPolicyResponseSchema, r));
      else {
        const p = r.policy;
        if (p === undefined) return undefined;
        print(
          table(
            ["SETTING", "VALUE"],
            [
              ["limitPerNode", p.limitPerNode === 0 ? "unlimited" : p.limitPerNode],
              ["idleCheck / idleTimeout", `${String(p.idleCheck)} / ${formatDurationMs(Number(p.idleTimeoutMs))}`],
              ["busyCheck / busyTimeout", `${String(p.busyCheck)} / ${formatDurationMs(Number(p.busyTimeoutMs))}`],
              ["memoryReclaimer / threshold", `${String(p.memoryReclaimer)} / ${String(p.memoryThreshold)}`],
              ["forceEvictionWhenBusy", String(p.forceEvictionWhenBusy)],
              ["sizeAware", String(p.sizeAware)],
              ["tickInterval", formatDurationMs(Number(p.tickIntervalMs))],
              ["enforcement retries", `${String(p.enforcementRetries)} × ${formatDurationMs(Number(p.enforcementRetryIntervalMs))}`],
              ...p.models.map((m) => [`model ${m.model}`, `${m.pinned ? "pinned" : "-"} groups=${m.groups.join(",") || "-"}`]),
            ],
          ),
        );
      }
      return undefined;
    }),
  );
  withGlobal(
    policy
      .command("set")
      .description("change settings live: limitPerNode=2 idleTimeout=5m idleCheck=true busyTimeout=1m busyCheck=true memoryReclaimer=true memoryThreshold=0.9 forceEvictionWhenBusy=false sizeAware=true")
      .argument("<key=value...>"),
  ).action(
    act(async (g, pairs: string[]) => {
      const patch: Partial<Record<keyof PolicyPatch, unknown>> = {};
      for (const p of pairs) {
        const eq = p.indexOf("=");
        if (eq <= 0) throw invalidArgument(p, "expected key=value");
        const k = p.slice(0, eq);
        const v = p.slice(eq + 1);
        const bool = (): boolean => {
          if (v !== "true" && v !== "false") throw invalidArgument(k, `expected true or false, got "${v}"`);
          return v === "true";
        };
        switch (k) {
          case "limitPerNode": {
            const n = Number(v);
            if (!Number.isInteger(n) || n < 0) throw invalidArgument(k, `expected an integer >= 0, got "${v}"`);
            patch.limitPerNode = n;
            break;
          }
          case "idleTimeout":
            patch.idleTimeoutMs = BigInt(parseDurationMs(v, k));
            break;
          case "busyTimeout":
            patch.busyTimeoutMs = BigInt(parseDurationMs(v, k));
            break;
          case "idleCheck":
          case "busyCheck":
          case "memoryReclaimer":
          case "forceEvictionWhenBusy":
          case "sizeAware":
            patch[k] = bool();
            break;
          case "memoryThreshold":
            patch.memoryThreshold = Number(v);
            break;
          default:
            throw invalidArgument(k, "unknown setting (see --help)");
        }
      }
      const r = await admin(g).updatePolicy({ patch: patch as PolicyPatch }, { timeoutMs: deadline(g) });
      print(g.json ? json(GetPolicyResponseSchema, { $typeName: "warden.v1.GetPolicyResponse", policy: r.policy }) : "policy updated");
      return undefined;
    }),
  );

  withGlobal(program.command("explain").description("where a load of <model> would go and why, per node, without acting").argument("<model>")).action(
    act(async (g, model: string) => {
      const r = await admin(g).explainPlacement({ model }, { timeoutMs: deadline(g) });
      if (g.json) {
        print(json(ExplainPlacementResponseSchema, r));
        return undefined;
      }
      const decision = PlacementDecision[r.decision].toLowerCase().replace(/_/g, "-");
      print(`${model}: ${decision}${r.nodeId === "" ? "" : ` on ${r.nodeId}`} — ${r.reason}`);
      if (r.nodes.length > 0) print(table(["NODE", "FITS", "REASON", "WOULD EVICT"], r.nodes.map((n) => [n.nodeId, n.fits ? "yes" : "no", n.reason, n.wouldEvict.join(", ") || "-"])));
      return undefined;
    }),
  );

  withGlobal(
    program
      .command("predict")
      .description("run a prompt; tokens stream as they arrive (loads the model on demand)")
      .argument("<model>")
      .argument("<prompt>")
      .option("--tokens <n>", "maximum tokens", "0")
      .option("--no-stream", "one reply instead of a stream"),
  ).action(
    act(async (g, model: string, prompt: string, o: { tokens: string; stream: boolean }) => {
      const tokens = Number(o.tokens);
      if (!Number.isInteger(tokens) || tokens < 0) throw invalidArgument("--tokens", `expected an integer >= 0, got "${o.tokens}"`);
      const c = inference(g);
      const req = { model, options: { Prompt: prompt, Tokens: tokens } };
      const done = progress(`waiting for ${model}`);
      let first = true;
      const stop = (): void => {
        if (first) {
          first = false;
          done();
        }
      };
      try {
        if (!o.stream) {
          const r = await c.predict(req, { timeoutMs: deadline(g) });
          stop();
          print(g.json ? JSON.stringify({ model, nodeId: r.nodeId, text: new TextDecoder().decode(r.reply?.message) }) : new TextDecoder().decode(r.reply?.message));
          return undefined;
        }
        for await (const r of c.predictStream(req, { timeoutMs: deadline(g) })) {
          stop();
          const text = new TextDecoder().decode(r.reply?.message);
          io.out.write(g.json ? `${JSON.stringify({ token: text })}\n` : text);
        }
        if (!g.json) io.out.write("\n");
      } finally {
        stop();
      }
      return undefined;
    }),
  );

  withGlobal(
    program
      .command("events")
      .description("follow events (gRPC WatchEvents, or the NATS audit stream with --nats)")
      .option("--type <type...>", "only these types (e.g. eviction.started eviction.failed)")
      .option("--node <id>", "only this node")
      .option("--model <id>", "only this model")
      .option("--nats <url>", "read the durable JetStream audit stream instead of WatchEvents")
      .option("--durable <name>", "durable consumer name (resume where it stopped)", "warden-cli")
      .option("--since <time>", "with --nats: start at this time (ISO 8601) for a new durable")
      .option("--from-seq <n>", "with --nats: start at this stream sequence for a new durable")
      .option("--creds <file>", "with --nats: NATS creds file")
      .option("--token <token>", "with --nats: NATS token (or NATS_TOKEN)")
      .option("--user <user>", "with --nats: NATS user (password from NATS_PASSWORD)"),
  ).action(
    act(async (g, o: { type?: string[]; node?: string; model?: string; nats?: string }) => {
      const types = (o.type ?? []).map((t, i) => parseEventType(t, `--type[${String(i)}]`));
      if (o.nats !== undefined) return runners.natsEvents(o, g);
      const ctl = new AbortController();
      const onSig = (): void => {
        ctl.abort();
      };
      process.once("SIGINT", onSig);
      try {
        for await (const r of admin(g).watchEvents({ types, nodeId: o.node ?? "", model: o.model ?? "" }, { signal: ctl.signal })) {
          const e = r.event;
          if (e === undefined) continue;
          print(g.json ? JSON.stringify(eventToJson(e)) : eventLine(e));
        }
      } catch (err) {
        if (!ctl.signal.aborted) throw err;
      } finally {
        process.removeListener("SIGINT", onSig);
      }
      return undefined;
    }),
  );

  return { program, exitCode: () => code };
}

/** One human line per event. */
export function eventLine(e: MessageShape<typeof EventSchema>): string {
  const t = e.time === undefined ? "" : new Date(Number(e.time.seconds) * 1000 + Math.floor(e.time.nanos / 1e6)).toISOString().slice(11, 23);
  const j = eventToJson(e) as Record<string, unknown>;
  const payloadKey = Object.keys(j).find((k) => !["type", "id", "time", "nodeId", "model", "address", "incarnation", "sequence"].includes(k));
  const payload = payloadKey === undefined ? "" : JSON.stringify(j[payloadKey]);
  return `${t} ${eventTypeOf(e).padEnd(22)} node=${e.nodeId || "-"} model=${e.model || "-"}${e.incarnation === "" ? "" : ` inc=${e.incarnation}`} ${payload === "{}" ? "" : payload}`.trimEnd();
}

/** Runs the program on argv; returns the exit code. */
export async function runCli(argv: readonly string[], io: CliIo, runners: Parameters<typeof buildProgram>[1]): Promise<number> {
  const { program, exitCode } = buildProgram(io, runners);
  try {
    await program.parseAsync([...argv], { from: "user" });
  } catch (err) {
    if (err instanceof CommanderError) {
      return err.code === "commander.helpDisplayed" || err.code === "commander.version" || err.exitCode === 0 ? exitCodes.ok : exitCodes.usage;
    }
    io.err.write(`warden: ${WardenError.from(err).message}\n`);
    return exitCodeOf(err) === exitCodes.error ? exitCodes.error : exitCodeOf(err);
  }
  return exitCode();
}

export { Code };
