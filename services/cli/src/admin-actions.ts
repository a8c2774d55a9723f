/**
 * What the admin commands do once parsed: the gRPC calls and their output.
 * Loaded on demand by program.ts, so `warden --help` and the long-running
 * commands never pay for the protobuf schemas, the gRPC client or the table renderer.
 */
import { toJson, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import type { EventSchema } from "@warden/proto";
import {
  AdminService,
  ExplainPlacementResponseSchema,
  GetPolicyResponseSchema,
  InferenceService,
  ListModelsResponseSchema,
  DeclareNodeLostResponseSchema,
  ListNodesResponseSchema,
  LoadJobState,
  LoadModelResponseSchema,
  NodeSchema,
  PlacementDecision,
  UnloadOutcome,
  type PolicyPatch,
} from "@warden/proto";
import { bearerMetadata, type Client } from "@warden/grpc";
import { cliClient } from "./cli-client.js";
import { cliTransport } from "./cli-tls.js";
import { Code, WardenError, formatDurationMs, invalidArgument, parseDurationMs, sleep, systemClock } from "@warden/common";
import { eventToJson, eventTypeOf, parseEventType } from "@warden/events";
import { exitCodes } from "./exit-codes.js";
import { bytes, modelsTable, nodesTable, table } from "./render.js";
import { replicasTable } from "./render-replicas.js";
import { loadJobsText, loadingLabel, waitingText } from "./render-load-jobs.js";
import { explainAllPages, instanceStateFilter, listAllModels, listAllNodes, nodeStateFilter, parseLimit } from "./list-pages.js";
import type { ActionContext, GlobalOpts } from "./action-context.js";

function json<T extends DescMessage>(schema: T, msg: MessageShape<T>): string {
  return JSON.stringify(toJson(schema, msg, { alwaysEmitImplicit: false }), null, 2);
}

// The lean HTTP/2 client, not grpc-js: every method the CLI calls is unary or server-streaming, and
// loading grpc-js (with proto-loader and protobufjs) was most of a short admin command's time.
const auth = (g: GlobalOpts): { headers?: Readonly<Record<string, string>> } => (g.authToken === undefined ? {} : { headers: bearerMetadata(g.authToken) });
const admin = (g: GlobalOpts): Client<typeof AdminService> => cliClient(AdminService, g, { ...cliTransport(g), ...auth(g) });
const inference = (g: GlobalOpts): Client<typeof InferenceService> => cliClient(InferenceService, g, { ...cliTransport(g), ...auth(g) });

export async function modelsLs(c: ActionContext, g: GlobalOpts, o: { node?: string; model?: string; state?: string; limit?: string }): Promise<number | undefined> {
  const a = admin(g);
  const limit = parseLimit(o.limit);
  const state = instanceStateFilter(o.state);
  if (o.node !== undefined) {
    // An unknown node would list nothing, exactly like an idle one: say which it is (naming a few known ones).
    const r = await a.listNodes({ nodeIdPrefix: o.node, pageSize: 1 }, { timeoutMs: c.deadline(g) });
    if (r.nodes[0]?.nodeId !== o.node) {
      const some = await a.listNodes({ pageSize: 20 }, { timeoutMs: c.deadline(g) });
      const known = some.nodes.map((n) => n.nodeId).join(", ");
      throw new WardenError(Code.NotFound, `no node "${o.node}" is registered (known: ${known === "" ? "none" : `${known}${some.nextPageToken === "" ? "" : ", …"}`})`);
    }
  }
  const r = await listAllModels(a, { nodeId: o.node ?? "", model: o.model ?? "", state }, limit, () => c.deadline(g));
  const filtered = o.node !== undefined || o.model !== undefined || o.state !== undefined;
  c.print(g.json ? json(ListModelsResponseSchema, r) : r.replicas.length === 0 || filtered ? modelsTable(r.instances) : `${modelsTable(r.instances)}\n\n${replicasTable(r.replicas)}`);
  // Loads waiting for a node, loading or failed: one line each (filtered by --model too).
  const jobs = g.json || o.node !== undefined || o.state !== undefined ? "" : loadJobsText(r.replicas, o.model, humanBytes);
  if (jobs !== "") c.print(`\n${jobs}`);
  if (!g.json && r.nextPageToken !== "") c.io.err.write(`warden: stopped at --limit ${String(limit)}; more instances match\n`);
  return undefined;
}

export async function modelsLoad(c: ActionContext, g: GlobalOpts, model: string, o: { node?: string }): Promise<number | undefined> {
  // With --node the operator chose the node: ExplainPlacement's verdict (for any node) does not apply.
  const w = watchedLoad(c, g, model, o.node === undefined, `loading ${model}`);
  try {
    const r = await admin(g).loadModel({ model, nodeId: o.node ?? "" }, { timeoutMs: c.deadline(g), signal: w.signal }).catch(w.failFast);
    w.stop();
    c.print(g.json ? json(LoadModelResponseSchema, r) : `loaded ${model} on ${r.instance?.nodeId ?? "?"} at ${r.instance?.address ?? "?"} (incarnation ${r.instance?.incarnation ?? "?"})`);
  } finally {
    w.stop();
  }
  return undefined;
}

export async function modelsUnload(c: ActionContext, g: GlobalOpts, model: string, o: { force: boolean; stopTimeout: string }): Promise<number | undefined> {
  const r = await admin(g).unloadModel({ model, force: o.force, stopTimeoutMs: BigInt(parseDurationMs(o.stopTimeout, "--stop-timeout")) }, { timeoutMs: c.deadline(g) });
  const outcome = UnloadOutcome[r.outcome].toLowerCase().replace(/_/g, "-");
  if (r.outcome === UnloadOutcome.NOT_LOADED) {
    // Nothing happened: a script should be able to tell (exit 4), and a person should be told.
    if (g.json) c.print(JSON.stringify({ model, outcome, error: r.error }));
    else c.io.err.write(`warden: ${model} is not loaded; nothing to unload\n`);
    return exitCodes.notFound;
  }
  if (g.json) c.print(JSON.stringify({ model, outcome, error: r.error }));
  else c.print(`${model}: ${outcome}${r.error === "" ? "" : ` (${r.error})`}`);
  return r.outcome === UnloadOutcome.STOPPED ? exitCodes.ok : exitCodes.incomplete;
}

export async function nodesLs(c: ActionContext, g: GlobalOpts, o: { node?: string; model?: string; state?: string; limit?: string } = {}): Promise<number | undefined> {
  const limit = parseLimit(o.limit);
  const r = await listAllNodes(admin(g), { nodeIdPrefix: o.node ?? "", model: o.model ?? "", state: nodeStateFilter(o.state) }, limit, () => c.deadline(g));
  c.print(g.json ? json(ListNodesResponseSchema, r) : nodesTable(r.nodes));
  if (!g.json && r.nextPageToken !== "") c.io.err.write(`warden: stopped at --limit ${String(limit)}; more nodes match\n`);
  return undefined;
}

export async function nodesDrain(c: ActionContext, g: GlobalOpts, node: string, o: { force: boolean }): Promise<number | undefined> {
  const r = await admin(g).drainNode({ nodeId: node, force: o.force }, { timeoutMs: c.deadline(g) });
  c.print(g.json && r.node !== undefined ? json(NodeSchema, r.node) : `draining ${node}: ${String(r.node?.drainRemaining ?? 0)} instance(s) to evict`);
  return undefined;
}

export async function nodesUndrain(c: ActionContext, g: GlobalOpts, node: string): Promise<number | undefined> {
  const r = await admin(g).undrainNode({ nodeId: node }, { timeoutMs: c.deadline(g) });
  c.print(g.json && r.node !== undefined ? json(NodeSchema, r.node) : `${node} accepts placements again`);
  return undefined;
}

export async function nodesLost(c: ActionContext, g: GlobalOpts, node: string, o: { reason?: string }): Promise<number | undefined> {
  const r = await admin(g).declareNodeLost({ nodeId: node, reason: o.reason ?? "" }, { timeoutMs: c.deadline(g) });
  if (g.json) c.print(json(DeclareNodeLostResponseSchema, r));
  else if (r.wasAlreadyLost) c.print(`${node} was already lost; nothing changed`);
  else c.print(`${node} declared lost: ${String(r.node?.instanceCount ?? 0)} instance(s) still accounted there as leftovers (stopped should it come back); their models may be placed elsewhere`);
  return undefined;
}

export async function policyGet(c: ActionContext, g: GlobalOpts): Promise<number | undefined> {
  const r = await admin(g).getPolicy({}, { timeoutMs: c.deadline(g) });
  if (g.json) {
    c.print(json(GetPolicyResponseSchema, r));
    return undefined;
  }
  const p = r.policy;
  if (p === undefined) return undefined;
  c.print(
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
  return undefined;
}

export async function policySet(c: ActionContext, g: GlobalOpts, pairs: string[]): Promise<number | undefined> {
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
      case "memoryThreshold": {
        // Checked here so the error names the setting the operator typed, not the wire field.
        const t = Number(v);
        if (v.trim() === "" || !(t > 0 && t <= 1)) throw invalidArgument(k, `expected a fraction in (0, 1], e.g. 0.95, got "${v}"`);
        patch.memoryThreshold = t;
        break;
      }
      default:
        throw invalidArgument(k, "unknown setting (see --help)");
    }
  }
  const r = await admin(g).updatePolicy({ patch: patch as PolicyPatch }, { timeoutMs: c.deadline(g) });
  c.print(g.json ? json(GetPolicyResponseSchema, { $typeName: "warden.v1.GetPolicyResponse", policy: r.policy }) : "policy updated");
  return undefined;
}

export async function explain(c: ActionContext, g: GlobalOpts, model: string, o: { node?: string; limit?: string } = {}): Promise<number | undefined> {
  const limit = parseLimit(o.limit);
  const r = await explainAllPages(admin(g), { model, nodeIdPrefix: o.node ?? "" }, limit, () => c.deadline(g));
  if (g.json) {
    c.print(json(ExplainPlacementResponseSchema, r));
    return undefined;
  }
  const decision = PlacementDecision[r.decision].toLowerCase().replace(/_/g, "-");
  c.print(`${model}: ${decision}${r.nodeId === "" ? "" : ` on ${r.nodeId}`} — ${humanBytes(r.reason)}`);
  if (r.nodesTotal > 0) c.print(`${String(r.nodesTotal)} node(s) weighed: ${String(r.nodesFit)} fit now, ${String(r.nodesFitAfterEviction)} after eviction`);
  if (r.nodes.length > 0) c.print(table(["NODE", "FITS", "REASON", "WOULD EVICT"], r.nodes.map((n) => [n.nodeId, n.fits ? "yes" : "no", humanBytes(n.reason), n.wouldEvict.join(", ") || "-"])));
  if (r.nextPageToken !== "") c.io.err.write(`warden: stopped at --limit ${String(limit)}; more nodes' verdicts follow\n`);
  return undefined;
}

/** Placement reasons count raw bytes ("needs 6442450944 bytes"); tables elsewhere print GiB. */
export function humanBytes(reason: string): string {
  return reason.replace(/\b(\d{4,}) bytes\b/g, (_, n: string) => bytes(Number(n)));
}

/**
 * While a load waits: its load job says why. WAIT in ExplainPlacement (no node
 * can take the model now, for a reason that ends: a draining or unreachable
 * node, none ready, no room) with the model's load job waiting shows as
 * "waiting for a node: <the job's reason>"; once a node is chosen the
 * line says "loading <model>" (`models load`) or "waiting for <model>" (a
 * call, which may also wait for a busy instance), and once the job reports
 * how far it got, that: "loading <model> (pulling, 42%, 11.8 MiB/s) on <node>". When no node could take the model even after
 * evictions the wait cannot end well — the call is abandoned at once with
 * that reason (exit 7) instead of a countdown.
 */
async function watchPlacement(g: GlobalOpts, model: string, signal: AbortSignal, onJob: (label: string) => void): Promise<string | undefined> {
  const a = admin(g);
  // A function, not the property: the signal changes across the awaits below.
  const aborted = (): boolean => signal.aborted;
  try {
    while (!aborted()) {
      const r = await a.explainPlacement({ model }, { timeoutMs: 5_000, signal }).catch(() => undefined);
      if (aborted()) return undefined;
      if (r?.decision === PlacementDecision.NO_FIT) return humanBytes(r.reason);
      // "Waiting for …" only once the load's job says so: admission is waiting, not evicting
      // (a pending eviction reads WAIT in ExplainPlacement for the moment it takes to settle). Whatever
      // ExplainPlacement says: a load held by busy instances may read FIT (after an eviction) meanwhile.
      const job = r !== undefined ? await jobLabel(a, model, signal) : undefined;
      if (aborted()) return undefined;
      if (r !== undefined) onJob(job === undefined ? "" : humanBytes(job));
      await sleep(systemClock, 1_000, signal).catch(() => undefined);
    }
    return undefined;
  } finally {
    a.close();
  }
}

/**
 * What the model's load job (ListModels' load_job) says for the progress line: why it waits for a
 * node, or how far it is loading ("loading m (pulling, 42%, 11.8 MiB/s) on gpu-3"); else undefined.
 */
async function jobLabel(a: ReturnType<typeof admin>, model: string, signal: AbortSignal): Promise<string | undefined> {
  const r = await a.listModels({ model, pageSize: 1 }, { timeoutMs: 5_000, signal }).catch(() => undefined);
  const job = r?.replicas.find((x) => x.model === model)?.loadJob;
  if (job?.state === LoadJobState.WAITING) return `${waitingText(job)}: ${job.reason}`;
  return job?.state === LoadJobState.LOADING ? loadingLabel(job) : undefined;
}

/** A load (or a call that loads on demand) with its progress line and ExplainPlacement watching it. */
function watchedLoad(c: ActionContext, g: GlobalOpts, model: string, failFastOnNoFit: boolean, busyLabel: string): { signal: AbortSignal; stop: () => void; failFast: (err: unknown) => never } {
  const call = new AbortController();
  const watch = new AbortController();
  // What the load's job says (waiting for a node, or how far it is loading); "" until it says anything.
  let jobSays = "";
  let noFit: string | undefined;
  const done = c.progress(() => (jobSays === "" ? busyLabel : jobSays));
  void watchPlacement(g, model, watch.signal, (label) => {
    jobSays = label;
  }).then((r) => {
    if (r === undefined || !failFastOnNoFit) return;
    noFit = r;
    call.abort();
  });
  let stopped = false;
  return {
    signal: call.signal,
    stop: () => {
      if (stopped) return;
      stopped = true;
      watch.abort();
      done();
    },
    failFast: (err: unknown): never => {
      if (noFit !== undefined) throw new WardenError(Code.FailedPrecondition, `cannot load ${model}: ${noFit}`);
      throw err;
    },
  };
}

export async function predict(c: ActionContext, g: GlobalOpts, model: string, prompt: string, o: { tokens: string; stream: boolean }): Promise<number | undefined> {
  const tokens = Number(o.tokens);
  if (!Number.isInteger(tokens) || tokens < 0) throw invalidArgument("--tokens", `expected an integer >= 0, got "${o.tokens}"`);
  const client = inference(g);
  const req = { model, options: { Prompt: prompt, Tokens: tokens } };
  // A call waits for a loading or a busy instance alike: "waiting for <model>" unless no node can take it yet.
  const w = watchedLoad(c, g, model, true, `waiting for ${model}`);
  try {
    if (!o.stream) {
      const r = await client.predict(req, { timeoutMs: c.deadline(g), signal: w.signal }).catch(w.failFast);
      w.stop();
      c.print(g.json ? JSON.stringify({ model, nodeId: r.nodeId, text: new TextDecoder().decode(r.reply?.message) }) : new TextDecoder().decode(r.reply?.message));
      return undefined;
    }
    try {
      for await (const r of client.predictStream(req, { timeoutMs: c.deadline(g), signal: w.signal })) {
        w.stop();
        const text = new TextDecoder().decode(r.reply?.message);
        c.io.out.write(g.json ? `${JSON.stringify({ token: text })}\n` : text);
      }
    } catch (err) {
      w.failFast(err);
    }
    if (!g.json) c.io.out.write("\n");
  } finally {
    w.stop();
  }
  return undefined;
}

export async function events(
  c: ActionContext,
  g: GlobalOpts,
  o: { type?: string[]; node?: string; model?: string; nats?: string; follow?: boolean },
  natsEvents: (o: Record<string, unknown>, g: GlobalOpts) => Promise<number>,
): Promise<number | undefined> {
  const types = (o.type ?? []).map((t, i) => parseEventType(t, `--type[${String(i)}]`));
  if (o.nats !== undefined) return natsEvents(o, g);
  const ctl = new AbortController();
  const onSig = (): void => {
    ctl.abort();
  };
  process.once("SIGINT", onSig);
  let connected = false;
  // One client across re-opens: it remembers a member that went silent and tries it last.
  const client = admin(g);
  try {
    for (;;) {
      try {
        for await (const r of client.watchEvents({ types, nodeId: o.node ?? "", model: o.model ?? "" }, { signal: ctl.signal })) {
          if (!connected && o.follow === true) c.io.err.write(`warden: following events at ${g.addr}\n`);
          connected = true;
          const e = r.event;
          if (e === undefined) continue;
          c.print(g.json ? JSON.stringify(eventToJson(e)) : eventLine(e));
        }
      } catch (err) {
        if (ctl.signal.aborted) return undefined;
        const e = WardenError.from(err);
        // The stream ends CANCELLED or UNAVAILABLE when the coordinator shuts down or restarts.
        // A CANCELLED stream was open (the coordinator ended it), and so was one ended with the
        // coordinator's shutdown status (details.shutdown); another UNAVAILABLE before any event may be a wrong address.
        const gone = e.code === Code.Canceled || (e.code === Code.Unavailable && (connected || e.details["shutdown"] === true));
        if (!gone && !(o.follow === true && e.code === Code.Unavailable)) throw err;
        if (o.follow !== true) {
          throw new WardenError(Code.Unavailable, `the coordinator at ${g.addr} went away (shut down or restarted); with --follow, warden events waits for it to return`);
        }
        if (connected) c.io.err.write(`warden: the coordinator at ${g.addr} went away; reconnecting …\n`);
        connected = false;
      }
      if (o.follow !== true) return undefined;
      await sleep(systemClock, 1_000, ctl.signal).catch(() => undefined);
      if (ctl.signal.aborted) return undefined;
    }
  } finally {
    process.removeListener("SIGINT", onSig);
    client.close();
  }
}

/** One human line per event. */
export function eventLine(e: MessageShape<typeof EventSchema>): string {
  const t = e.time === undefined ? "" : new Date(Number(e.time.seconds) * 1000 + Math.floor(e.time.nanos / 1e6)).toISOString().slice(11, 23);
  const j = eventToJson(e) as Record<string, unknown>;
  const payloadKey = Object.keys(j).find((k) => !["type", "id", "time", "nodeId", "model", "address", "incarnation", "sequence", "actor"].includes(k));
  const payload = payloadKey === undefined ? "" : JSON.stringify(j[payloadKey]);
  // Who asked (an operator's load or unload): quoted, since it holds spaces and quotes itself.
  const by = e.actor === "" ? "" : ` by=${JSON.stringify(e.actor)}`;
  return `${t} ${eventTypeOf(e).padEnd(22)} node=${e.nodeId || "-"} model=${e.model || "-"}${e.incarnation === "" ? "" : ` inc=${e.incarnation}`}${by} ${payload === "{}" ? "" : payload}`.trimEnd();
}

/** `warden trace export --since 24h`: the coordinator's workload trace (JSON lines) to stdout, as it streams. */
export async function traceExport(c: ActionContext, g: GlobalOpts, o: { since: string }): Promise<number | undefined> {
  const sinceMs = o.since === "all" ? 0 : parseDurationMs(o.since, "--since");
  const ctl = new AbortController();
  const onSig = (): void => {
    ctl.abort();
  };
  process.once("SIGINT", onSig);
  try {
    const since = sinceMs === 0 ? 0n : BigInt(Math.max(0, systemClock.wallNow() - sinceMs));
    for await (const chunk of admin(g).exportTrace({ sinceUnixMs: since }, { signal: ctl.signal })) {
      if (!c.io.out.write(chunk.data)) await new Promise<void>((resolve) => c.io.out.once("drain", resolve));
    }
  } finally {
    process.off("SIGINT", onSig);
  }
  return undefined;
}
