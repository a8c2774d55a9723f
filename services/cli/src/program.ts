import { Command, CommanderError, Option } from "commander";
import { Code, WardenError, parseDurationMs, wardenVersion } from "@warden/common";
import { errorLine, exitCodeHelp, exitCodeOf, exitCodes } from "./exit-codes.js";
import { parseAddrList } from "./addr.js";
import { cliToken } from "./cli-token.js";
import { progressLine } from "./progress-line.js";
import type { ActionContext, CliIo, GlobalOpts, Runners } from "./action-context.js";
import type * as AdminActions from "./admin-actions.js";
import { certsCommand } from "./certs-command.js";
import { natsCommand } from "./nats-command.js";
import { installCommand } from "./install-command.js";
import { whatifCommands } from "./whatif-command.js";
import type * as BackendActions from "./backend-actions.js";
import type * as ReplicaActions from "./replica-actions.js";
import type * as HaActions from "./ha-actions.js";
import type * as LogsActions from "./logs-actions.js";
import type * as BundleActions from "./bundle-actions.js";

export type { CliIo } from "./action-context.js";

const defaultAddr = "127.0.0.1:50051";

/** The admin actions, loaded on first use: `--help` and the long-running commands never load protobuf or the gRPC client. */
const actions = (): Promise<typeof AdminActions> => import("./admin-actions.js");
const backendActions = (): Promise<typeof BackendActions> => import("./backend-actions.js");
const replicaActions = (): Promise<typeof ReplicaActions> => import("./replica-actions.js");
const haActions = (): Promise<typeof HaActions> => import("./ha-actions.js");
const logsActions = (): Promise<typeof LogsActions> => import("./logs-actions.js");
const bundleActions = (): Promise<typeof BundleActions> => import("./bundle-actions.js");

/**
 * Builds the `warden` command tree. Every command has `--help`; admin
 * commands take `--addr` (or WARDEN_ADDR) and `--json`; errors print one line
 * and exit with a code that means something (see exit-codes.ts).
 */
export function buildProgram(io: CliIo, runners: Runners): { program: Command; exitCode: () => number } {
  let code: number = exitCodes.ok;
  const program = new Command("warden")
    .description("Warden: a control plane for GPU model backends that never forgets a backend holding memory.")
    .version(wardenVersion, "-V, --version", "print the version")
    .configureOutput({ writeOut: (s) => io.out.write(s), writeErr: (s) => io.err.write(s) })
    .exitOverride()
    .addHelpText("after", `\n${exitCodeHelp}\n`)
    .showHelpAfterError("(run with --help for usage)");

  const withGlobal = (c: Command): Command =>
    c
      .addOption(new Option("--addr <host:port[,host:port…]>", "Warden admin/inference address; with HA coordinators list them all (1..8, comma-separated): calls follow the leader, and a member that answers nothing for 2 s is passed over").env("WARDEN_ADDR").default(defaultAddr))
      .option("--json", "machine-readable JSON output", false)
      .option("--timeout <duration>", "deadline for the call (e.g. 30s, 10m)", "10m")
      .addOption(new Option("--tls-ca <file>", "connect over TLS, verifying Warden's certificate against this CA").env("WARDEN_TLS_CA"))
      .addOption(new Option("--tls-cert <file>", "client certificate for mutual TLS (e.g. admin.pem from `warden certs init`)").env("WARDEN_TLS_CERT"))
      .addOption(new Option("--tls-key <file>", "the client certificate's key").env("WARDEN_TLS_KEY"))
      .addOption(new Option("--tls-server-name <name>", "the name Warden's certificate carries, when not the --addr host").env("WARDEN_TLS_SERVER_NAME"))
      .option("--token-file <file>", "bearer token for a coordinator with auth on (default: WARDEN_TOKEN)");

  const ctx: ActionContext = {
    io,
    print: (s: string): void => {
      io.out.write(s.endsWith("\n") ? s : `${s}\n`);
    },
    deadline: (g: GlobalOpts): number => parseDurationMs(g.timeout, "--timeout"),
    progress: (label: string | (() => string), why?: () => string): (() => void) => {
      const start = Date.now();
      let shown = false;
      const timer = setInterval(() => {
        shown = true;
        const line = progressLine(typeof label === "string" ? label : label(), Date.now() - start, why?.() ?? "");
        io.err.write(io.interactive ? `\r\x1b[K${line}` : `${line}\n`);
      }, 1_000);
      return () => {
        clearInterval(timer);
        if (shown && io.interactive) io.err.write("\n");
      };
    },
  };

  /** Runs one admin action with a one-line error and a meaningful exit code. */
  const act =
    <A extends unknown[]>(fn: (a: Awaited<ReturnType<typeof actions>>, g: GlobalOpts, ...args: A) => Promise<number | undefined>) =>
    async (...args: A): Promise<void> => {
      const cmd = args[args.length - 1] as Command;
      const g = cmd.opts<GlobalOpts>();
      try {
        // Checked before the call so a typo is exit 2 naming the flag, not a raw resolver error.
        parseAddrList(g.addr, "--addr");
        const token = cliToken(g.tokenFile, io.env);
        if (token !== undefined) g.authToken = token;
        code = (await fn(await actions(), g, ...args)) ?? exitCodes.ok;
      } catch (err) {
        io.err.write(`${errorLine(err, g.addr)}\n`);
        code = exitCodeOf(err);
      }
    };

  const serviceOptions = (c: Command, what: { readonly listen: string; readonly stateDir: string }): Command =>
    c
      .option("--listen <host:port>", `admin/inference address (overrides ${what.listen})`)
      .option("--state-dir <dir>", `journal and agent records (overrides ${what.stateDir})`)
      .option("--metrics <host:port>", "serve Prometheus metrics at http://HOST:PORT/metrics")
      .option("--http <host:port|off>", "the OpenAI-compatible HTTP API (overrides httpListen; `up` serves it at 127.0.0.1:8080 unless the config sets one)")
      .option("--log-level <level>", "log level: trace, debug, info, warn, error, fatal", "info")
      .option("--log-pretty", "readable log lines on stderr (the default on a terminal)")
      .option("--log-json", "JSON log lines on stdout (the default when stdout is not a terminal)")
      .option("--check-config", "validate the config and print the effective settings, then exit (0 valid, 2 not)", false)
      .option("--insecure", "allow plaintext gRPC on a non-loopback address (overrides the config's insecure)")
      .option("--tls-cert <file>", "serve TLS with this certificate chain (overrides tls.cert)")
      .option("--tls-key <file>", "the certificate's private key (overrides tls.key)")
      .option("--tls-ca <file>", "mutual TLS with agents: require certificates this CA signed (overrides tls.ca)");

  serviceOptions(
    program
      .command("up")
      .description("run a coordinator with an embedded agent and the built-in demo config (three backend-sim models); Ctrl-C stops every backend it started")
      .option("--config <file>", "YAML config instead of the built-in demo"),
    { listen: "the config's; default 127.0.0.1:50051", stateDir: "the config's; default ./.warden" },
  ).action(async (o: Record<string, unknown>) => {
    code = await runners.up(o);
  });

  serviceOptions(
    program
      .command("coordinator")
      .description("run a coordinator (no demo config; backends keep running when it stops)")
      .requiredOption("--config <file>", "YAML config (see README)")
      .option("--ha", "run as an HA member: compete for the leader lease on NATS JetStream, serve as a standby until won (the config's ha: section, or its defaults: lease 3s, renew 1s, margin 500ms, replicas 3); needs embeddedAgent: false and nats.url")
      .option("--nats-url <urls>", "comma-separated NATS cluster URLs (overrides nats.url)"),
    { listen: "the config's", stateDir: "the config's" },
  ).action(async (o: Record<string, unknown>) => {
    code = await runners.coordinator(o);
  });

  program
    .command("agent")
    .description("run a node agent that registers with a coordinator")
    .requiredOption("--config <file>", "agent YAML config (see services/agent/README.md)")
    .option("--coordinator <host:port[,host:port…]>", "coordinator NodeService address; with HA coordinators list them all (1..8, comma-separated): the agent follows the leader")
    .option("--listen <host:port>", "AgentService address (overrides the config)")
    .option("--stop-backends-on-exit", "on SIGTERM/SIGINT stop every backend (default: leave them running for adoption)", false)
    .option("--metrics <host:port>", "serve Prometheus metrics at http://HOST:PORT/metrics")
    .option("--check-config", "validate the config and print the effective settings, then exit (0 valid, 2 not)", false)
    .option("--insecure", "allow plaintext gRPC on a non-loopback address (overrides the config's insecure)")
    .option("--max-replicas-per-model <n>", "replicas of one model this node may hold, 1..1024 (overrides the config's maxReplicasPerModel)")
    .option("--memory-budget <size|pct>", 'what placement may account on this node, "40GiB" or "80%" (overrides the config\'s memoryBudget)')
    .action(async (o: { config: string; coordinator?: string; listen?: string; stopBackendsOnExit: boolean; metrics?: string; checkConfig: boolean; insecure?: boolean; maxReplicasPerModel?: string; memoryBudget?: string }) => {
      const args = ["--config", o.config];
      if (o.coordinator !== undefined) args.push("--coordinator", o.coordinator);
      if (o.listen !== undefined) args.push("--listen", o.listen);
      if (o.stopBackendsOnExit) args.push("--stop-backends-on-exit");
      if (o.metrics !== undefined) args.push("--metrics", o.metrics);
      if (o.checkConfig) args.push("--check-config");
      if (o.insecure === true) args.push("--insecure");
      if (o.maxReplicasPerModel !== undefined) args.push("--max-replicas-per-model", o.maxReplicasPerModel);
      if (o.memoryBudget !== undefined) args.push("--memory-budget", o.memoryBudget);
      code = await runners.agent(args);
    });

  const viaReplicas = <A extends unknown[]>(fn: (r: typeof ReplicaActions, g: GlobalOpts, ...args: A) => Promise<number | undefined>) => act(async (_a, g, ...args: A) => fn(await replicaActions(), g, ...args));
  const models = program.command("models").description("list, load, unload and scale models");
  const haCmd = program.command("ha").description("coordinator high availability");
  withGlobal(
    haCmd
      .command("status")
      .description("the leader lease as the coordinator at --addr sees it (leader, epoch, lease age, quorum) and every member seen within 30 s (a standby answers too)"),
  ).action(act(async (_a, g) => (await haActions()).haStatus(ctx, g)));
  withGlobal(
    program
      .command("logs")
      .description("the last lines of an instance's backend stdout and stderr, read from its node's agent (operator role)")
      .argument("<instance>", "an incarnation (`warden models ls --json`), or a model with one instance")
      .option("--lines <n>", "lines per stream, 1..1000", "100"),
  ).action(act(async (_a, g, instance: string, o: { lines: string }) => (await logsActions()).instanceLogs(ctx, g, instance, o.lines)));
  withGlobal(
    models
      .command("ls")
      .description("every instance: loaded, loading, freed, pending eviction, leftover, orphan")
      .option("--node <id>", "only this node")
      .option("--model <id>", "only instances of this model")
      .option("--state <state>", "only instances in this state: loading, ready, freed, pending-eviction, leftover, orphan, unconfirmed")
      .option("--limit <n>", "at most n instances (default: all; read 1 000 a call)")
      .addHelpText("after", "\nInstances are ordered by node, model, incarnation. Every page is read unless --limit cuts it short\n(the rest is announced on stderr; with --json, nextPageToken says where it would go on).\n")
      .addHelpText("after", "\nAfter the instances (without a filter), one row per configured model: READY/DESIRED replicas, MIN..MAX (the config's\nor a `models scale` override), loading/stopping/leftover replicas, calls QUEUED for a ready one, and\nSCALE-UP: blocked (the circuit breaker: the error, failures, when it retries) or -; while some model rolls out,\nROLLOUT: rolling out <current>/<total> (replicas on the current load settings, of all) or -.\nThen LOAD JOBS, one line per load waiting (for a node, or for the recovery window after a start, with\nthe reason), loading (its phase) or failed (the reason and code).\n")
      .addHelpText("after", "\nPLACEMENT: local = started by the coordinator's embedded agent; local+remote = a process on another\nnode's agent, routed through the coordinator (its client and routing state are local); remote-only =\nknown only from a node's inventory (e.g. adopted after a restart) until first routed.\n"),
  ).action(act((a, g, o: { node?: string; model?: string; state?: string; limit?: string }) => a.modelsLs(ctx, g, o)));
  withGlobal(models.command("load").description("load a model (or return the loaded instance)").argument("<model>").option("--node <id>", "place on this node")).action(
    act((a, g, model: string, o: { node?: string }) => a.modelsLoad(ctx, g, model, o)),
  );
  withGlobal(
    models
      .command("unload")
      .description("unload a model and report the real outcome")
      .argument("<model>")
      .option("--force", "skip the busy wait and Free; SIGKILL at once", false)
      .option("--stop-timeout <duration>", "bounds lock + busy wait + Free", "30s"),
  ).action(act((a, g, model: string, o: { force: boolean; stopTimeout: string }) => a.modelsUnload(ctx, g, model, o)));
  withGlobal(
    models
      .command("scale")
      .description("set a model's replica bounds live (Admin ScaleModel, audited as replica.scale-set): min replicas kept ready, at most max; a flag left out keeps its value")
      .argument("<model>")
      .option("--min <n>", "replicas kept ready (0 = load on demand), 0..1024")
      .option("--max <n>", "most replicas at once, 1..1024 (>= min)")
      .option("--operator <name>", "who asks, recorded in the audit event (default: the OS user)"),
  ).action(viaReplicas((r, g, model: string, o: { min?: string; max?: string; operator?: string }) => r.modelsScale(ctx, g, model, o)));

  const nodes = program.command("nodes").description("list, drain and undrain nodes; declare an unreachable node lost; show or override placement limits");
  withGlobal(
    nodes
      .command("ls")
      .description("registered nodes with health, version, drain progress and memory")
      .option("--node <prefix>", "only nodes whose id starts with this")
      .option("--model <id>", "only nodes holding an instance of this model")
      .option("--state <state>", "only nodes in this state: ready, unreachable, lost, not-reported")
      .option("--limit <n>", "at most n nodes (default: all; read 1 000 a call)")
      .addHelpText("after", "\nNodes are ordered by id. Every page is read unless --limit cuts it short (the rest is announced\non stderr; with --json, nextPageToken says where it would go on).\n"),
  ).action(act((a, g, o: { node?: string; model?: string; state?: string; limit?: string }) => a.nodesLs(ctx, g, o)));
  withGlobal(nodes.command("drain").description("stop placing on a node and evict its instances (pinned ones too)").argument("<node>").option("--force", "force-stop busy instances", false)).action(
    act((a, g, node: string, o: { force: boolean }) => a.nodesDrain(ctx, g, node, o)),
  );
  withGlobal(nodes.command("undrain").description("allow placements on a node again").argument("<node>")).action(act((a, g, node: string) => a.nodesUndrain(ctx, g, node)));
  withGlobal(
    nodes
      .command("lost")
      .summary("declare an unreachable node lost now (an operator's word)")
      .description("declare an unreachable node lost now (an operator's audited word, instead of waiting for nodeLostAfter): its instances become leftovers there, stopped should it come back, and their models may be placed elsewhere. A ready node is refused (exit 7): drain it instead. Already lost: exit 0, nothing changes")
      .argument("<node>")
      .option("--reason <text>", "why, recorded in the node.lost audit event"),
  ).action(act((a, g, node: string, o: { reason?: string }) => a.nodesLost(ctx, g, node, o)));
  withGlobal(
    nodes
      .command("limits")
      .summary("show or override a node's placement limits")
      .description("show a node's placement limits (no flags), or override them (Admin SetNodeLimits): the flags given replace the override's, the others keep theirs; the override wins over the agent's config and survives the agent's restart; --clear drops it")
      .argument("<node>")
      .option("--max-replicas-per-model <n>", "replicas of one model the node may hold, 1..1024")
      .option("--memory-budget <size|pct>", 'what placement may account on the node: "40GiB" or "80%" of its GPU memory (RAM without GPUs)')
      .option("--clear", "remove the override (the agent's limits apply again)", false)
      .option("--operator <name>", "who asks, recorded in the audit event (default: the OS user)"),
  ).action(viaReplicas((r, g, node: string, o: { maxReplicasPerModel?: string; memoryBudget?: string; clear: boolean; operator?: string }) => r.nodesLimits(ctx, g, node, o)));

  const backends = program.command("backends").description("backend bundles (catalog entries with `bundle:`) on the nodes: list, install, remove");
  const bundleHelp = "\nExit 8 when some node did not answer or did not do it (its line says why); the others did.\n";
  withGlobal(
    backends
      .command("ls")
      .description("each node's catalog bundles: installed or not, processes running, digest, source; a node that cannot answer is listed with why (viewer role)")
      .option("--node <id>", "only this node")
      .addHelpText("after", bundleHelp),
  ).action(act(async (_a, g, o: { node?: string }) => (await bundleActions()).backendsLs(ctx, g, o)));
  withGlobal(
    backends
      .command("install")
      .description("install a catalog backend's bundle now, on one node or on every node whose catalog names it (operator role; audited as backend.installed)")
      .argument("<backend>", "the catalog entry's name")
      .option("--node <id>", "on this node")
      .option("--all", "on every node whose catalog names the backend", false)
      .addHelpText("after", bundleHelp),
  ).action(act(async (_a, g, backend: string, o: { node?: string; all: boolean }) => (await bundleActions()).backendsInstall(ctx, g, backend, o)));
  withGlobal(
    backends
      .command("remove")
      .description("remove a backend's installed bundle from one node or every node; refused (exit 7, nothing removed) while an instance of a model using it runs or starts there (operator role; audited as backend.removed)")
      .argument("<backend>", "the catalog entry's name")
      .option("--node <id>", "from this node")
      .option("--all", "from every node whose catalog names the backend", false)
      .addHelpText("after", bundleHelp),
  ).action(act(async (_a, g, backend: string, o: { node?: string; all: boolean }) => (await bundleActions()).backendsRemove(ctx, g, backend, o)));

  const policy = program.command("policy").description("show or change the live eviction policy");
  withGlobal(policy.command("get").description("the live policy")).action(act((a, g) => a.policyGet(ctx, g)));
  withGlobal(
    policy
      .command("set")
      .description("change settings live: limitPerNode=2 idleTimeout=5m idleCheck=true busyTimeout=1m busyCheck=true memoryReclaimer=true memoryThreshold=0.9 forceEvictionWhenBusy=false sizeAware=true")
      .argument("<key=value...>"),
  ).action(act((a, g, pairs: string[]) => a.policySet(ctx, g, pairs)));
  const traceCmd = whatifCommands(program, policy, io, runners, (c) => {
    code = c;
  });
  withGlobal(
    traceCmd
      .command("export")
      .description("the coordinator's recorded workload trace as JSON lines to stdout (admin role)")
      .option("--since <duration>", "only what happened in this last while (e.g. 24h, 30m); all: everything kept", "24h")
      .addHelpText("after", "\nThe trace holds per call its model, wait and duration (never a prompt or an output),\nloads, evictions with their reasons, node joins and losses, memory readings and\noperators' changes; at most trace.maxBytes (64 MiB) is kept. Replay it:\n  warden trace export --since 24h > trace.jsonl\n  warden policy simulate --trace trace.jsonl --policy candidate.yaml --against warden.yaml\n"),
  ).action(act((a, g, o: { since: string }) => a.traceExport(ctx, g, o)));

  withGlobal(
    program
      .command("explain")
      .description("where a load of <model> would go and why, per node, without acting")
      .argument("<model>")
      .option("--node <prefix>", "list only the verdicts of nodes whose id starts with this (the decision still weighs every node)")
      .option("--limit <n>", "at most n nodes' verdicts (default: all; read 1 000 a call)")
      .addHelpText("after", "\nThe decision and the counts weigh every node. Verdicts are ordered by node id; every page is read\nunless --limit cuts it short (announced on stderr; with --json, nextPageToken says where it would go on).\n"),
  ).action(act((a, g, model: string, o: { node?: string; limit?: string }) => a.explain(ctx, g, model, o)));

  withGlobal(
    program
      .command("predict")
      .description("run a prompt; tokens stream as they arrive (loads the model on demand)")
      .argument("<model>")
      .argument("<prompt>")
      .option("--tokens <n>", "maximum tokens", "0")
      .option("--no-stream", "one reply instead of a stream"),
  ).action(act((a, g, model: string, prompt: string, o: { tokens: string; stream: boolean }) => a.predict(ctx, g, model, prompt, o)));

  // LocalAI backend calls through Warden (backend.Backend, model in the warden-model metadata).
  const viaBackend = <A extends unknown[]>(fn: (b: typeof BackendActions, g: GlobalOpts, ...args: A) => Promise<number | undefined>) => act(async (_a, g, ...args: A) => fn(await backendActions(), g, ...args));
  withGlobal(program.command("embed").description("the embedding of a text (backend Embedding; loads the model on demand)").argument("<model>").argument("<text>")).action(viaBackend((b, g, model: string, text: string) => b.embed(ctx, g, model, text)));
  withGlobal(
    program
      .command("tts")
      .description("speech for a text into a local file (backend TTSStream, a WAV when the backend gives its sample rate; TTS with dst when it has no stream)")
      .argument("<model>")
      .argument("<text>")
      .requiredOption("-o, --out <file>", "the audio file to write")
      .option("--voice <voice>", "the backend's voice name")
      .option("--language <code>", "language of the text"),
  ).action(viaBackend((b, g, model: string, text: string, o: { out: string; voice?: string; language?: string }) => b.tts(ctx, g, model, text, o)));
  withGlobal(
    program
      .command("transcribe")
      .description("the text of an audio file (backend AudioTranscription; the backend reads the file at its absolute path on its node)")
      .argument("<model>")
      .argument("<file>")
      .option("--language <code>", "spoken language (default: the backend detects it)")
      .option("--translate", "translate to English", false),
  ).action(viaBackend((b, g, model: string, file: string, o: { language?: string; translate?: boolean }) => b.transcribe(ctx, g, model, file, o)));

  withGlobal(
    program
      .command("events")
      .description("follow events (gRPC WatchEvents, or the NATS audit stream with --nats)")
      .option("--type <type...>", "only these types (e.g. eviction.started eviction.failed)")
      .option("--node <id>", "only this node")
      .option("--model <id>", "only this model")
      .option("--follow", "keep following across coordinator restarts (reconnects every second)", false)
      .option("--nats <url>", "read the durable JetStream audit stream instead of WatchEvents")
      .option("--durable <name>", "durable consumer name (resume where it stopped)", "warden-cli")
      .option("--since <time>", "with --nats: start at this time (ISO 8601) for a new durable")
      .option("--from-seq <n>", "with --nats: start at this stream sequence for a new durable")
      .option("--creds <file>", "with --nats: NATS creds file")
      .option("--token <token>", "with --nats: NATS token (or NATS_TOKEN)")
      .option("--user <user>", "with --nats: NATS user (password from NATS_PASSWORD)"),
  ).action(act((a, g, o: { type?: string[]; node?: string; model?: string; nats?: string; follow?: boolean }) => a.events(ctx, g, o, (no, ng) => runners.natsEvents(no, ng))));

  certsCommand(program, io, (c) => {
    code = c;
  });
  natsCommand(program, io, (c) => {
    code = c;
  });
  installCommand(program, io, (c) => {
    code = c;
  });

  const tokens = program.command("tokens").description("bearer tokens for a coordinator with auth.tokensFile");
  tokens
    .command("mint")
    .description("make a token and print the line (its SHA-256, never the token) for the coordinator's tokens file")
    .requiredOption("--role <role>", "viewer, operator, admin, inference or node")
    .option("--node <id>", "the node id a node token is bound to (required for --role node)")
    .option("--models <a,b>", "inference tokens: only these models")
    .option("--name <label>", "a name the coordinator logs instead of the token")
    .option("--priority <class>", "critical, standard or sheddable: the class this token's calls run at and the highest they may ask for (default standard)")
    .option("--out <file>", "write the token to this new file (mode 0600) and print only the line")
    .action(async (o: { role: string; node?: string; models?: string; name?: string; priority?: string; out?: string }) => {
      try {
        const { tokensMint } = await import("./tokens-mint.js");
        code = await tokensMint(io, o);
      } catch (err) {
        io.err.write(`warden: ${WardenError.from(err).message}\n`);
        code = exitCodeOf(err);
      }
    });

  return { program, exitCode: () => code };
}

/** Runs the program on argv; returns the exit code. */
export async function runCli(argv: readonly string[], io: CliIo, runners: Runners): Promise<number> {
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
