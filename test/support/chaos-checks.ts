/**
 * Invariant checks for the real-process chaos tests (reliability.md 1, 2, 8, 9,
 * 10), run once the faults stop. They compare Warden's view (the Admin API) with
 * ground truth — the backend-sim processes this test file's agents really run,
 * read from /proc (only processes carrying the file's tag, i.e. started by a
 * Warden agent for this file) — and the audit stream on the real nats-server
 * with what the coordinators logged.
 *
 * `untilConverged` polls (convergence is a liveness property: it holds once the
 * reconciler caught up), then asserts the last observation so a failure shows
 * the difference rather than a bare timeout.
 */
import { readFile } from "node:fs/promises";
import { expect } from "vitest";
import type { Client } from "@warden/grpc";
import { type AdminService, type Event, EvictionFailedOutcome, InstanceState, NodeState } from "@warden/proto";
import { eventTypeOf } from "@warden/events";
import { liveTaggedSims } from "./agent-harness.js";
import { storedEvents } from "./audit-stream-reader.js";
import type { LoggedEvent } from "./coordinator-process.js";

/** A backend process that really runs: its pid and the mark its agent put in its environment. */
export interface RunningBackend {
  readonly pid: number;
  readonly nodeId: string;
  readonly incarnation: string;
}

/** Live backend-sim processes tagged `tagPrefix…`, with node id and incarnation from their mark. */
export async function runningBackends(tagPrefix: string): Promise<RunningBackend[]> {
  const out: RunningBackend[] = [];
  for (const pid of await liveTaggedSims(tagPrefix)) {
    try {
      const env = new Map(
        (await readFile(`/proc/${String(pid)}/environ`, "utf8"))
          .split("\0")
          .map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)] as const),
      );
      out.push({ pid, nodeId: env.get("WARDEN_NODE_ID") ?? "", incarnation: env.get("WARDEN_INCARNATION") ?? "" });
    } catch {
      // exited between the scan and the read
    }
  }
  return out.sort((a, b) => a.incarnation.localeCompare(b.incarnation));
}

export interface ClusterView {
  /** (node, incarnation, model, state, inFlight, sizeBytes, pendingEviction) per ListModels row. */
  readonly rows: readonly { node: string; incarnation: string; model: string; state: InstanceState; inFlight: number; sizeBytes: bigint; pending: boolean }[];
  readonly nodes: readonly { node: string; state: NodeState; instanceCount: number; draining: boolean }[];
  readonly configuredSize: ReadonlyMap<string, bigint>;
  readonly running: readonly RunningBackend[];
}

/**
 * One observation: ground truth read before and after the Admin calls, and
 * only processes seen both times count (a stop confirmed in between is not a
 * lost backend, a start begun in between is not a phantom).
 */
export async function observe(admin: Client<typeof AdminService>, tagPrefix: string): Promise<ClusterView> {
  const before = await runningBackends(tagPrefix);
  const models = await admin.listModels({});
  const nodes = await admin.listNodes({});
  const after = new Set((await runningBackends(tagPrefix)).map((r) => r.pid));
  return {
    rows: models.instances.map((i) => ({ node: i.nodeId, incarnation: i.incarnation, model: i.model, state: i.state, inFlight: i.inFlight, sizeBytes: i.sizeBytes, pending: i.pendingEviction })),
    nodes: nodes.nodes.map((n) => ({ node: n.nodeId, state: n.state, instanceCount: n.instanceCount, draining: n.draining })),
    configuredSize: new Map(models.configured.map((m) => [m.model, m.sizeBytes])),
    running: before.filter((r) => after.has(r.pid)),
  };
}

/**
 * What is wrong with `v` as a converged cluster (empty when nothing):
 * - every process that runs is listed, on its node, by its incarnation (no amnesia, no lost backend)
 *   and every listed instance runs (no phantom);
 * - each node's accounted bytes are at least the configured sizes of what really runs on it;
 * - nothing is a leftover, an orphan, pending or loading; in-flight is 0;
 * - every node is ready, and counts exactly the instances that run on it.
 */
export function convergenceProblems(v: ClusterView, expectedNodes: readonly string[]): string[] {
  const problems: string[] = [];
  const listed = new Map(v.rows.map((r) => [`${r.node}/${r.incarnation}`, r]));
  const real = new Set(v.running.map((r) => `${r.nodeId}/${r.incarnation}`));
  for (const r of v.running) if (!listed.has(`${r.nodeId}/${r.incarnation}`)) problems.push(`lost backend: pid ${String(r.pid)} ${r.nodeId}/${r.incarnation} runs but is not listed`);
  for (const r of v.rows) {
    const key = `${r.node}/${r.incarnation}`;
    if (!real.has(key)) problems.push(`phantom: ${key} (${r.model}) listed as state ${String(r.state)} but no such process runs`);
    if (r.state !== InstanceState.READY || r.pending) problems.push(`${key} (${r.model}) is state ${String(r.state)}${r.pending ? " pending eviction" : ""}, not ready`);
    if (r.inFlight !== 0) problems.push(`${key} (${r.model}) has ${String(r.inFlight)} in flight`);
  }
  for (const node of new Set([...expectedNodes, ...v.rows.map((r) => r.node), ...v.running.map((r) => r.nodeId)])) {
    const accounted = v.rows.filter((r) => r.node === node).reduce((s, r) => s + r.sizeBytes, 0n);
    const reality = v.running
      .filter((r) => r.nodeId === node)
      .reduce((s, r) => s + (v.configuredSize.get(v.rows.find((x) => x.incarnation === r.incarnation)?.model ?? "") ?? 1n), 0n);
    if (accounted < reality) problems.push(`node ${node} accounts ${String(accounted)} bytes, below the ${String(reality)} that really run`);
    const n = v.nodes.find((x) => x.node === node);
    const runs = v.running.filter((r) => r.nodeId === node).length;
    if (n === undefined) problems.push(`node ${node} is not listed`);
    else {
      if (n.state !== NodeState.READY) problems.push(`node ${node} is state ${String(n.state)}, not ready`);
      if (n.instanceCount !== runs) problems.push(`node ${node} counts ${String(n.instanceCount)} instances, ${String(runs)} run`);
    }
  }
  return problems;
}

/** Waits until the cluster is converged (see convergenceProblems), then returns the view; fails with the last problems. */
export async function untilConverged(admin: Client<typeof AdminService>, tagPrefix: string, expectedNodes: readonly string[], timeoutMs = 90_000): Promise<ClusterView> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await observe(admin, tagPrefix).catch(() => undefined);
    const problems = v === undefined ? ["the Admin API did not answer"] : convergenceProblems(v, expectedNodes);
    if (problems.length === 0 && v !== undefined) return v;
    if (Date.now() > end) {
      expect(problems, "cluster did not converge").toEqual([]);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * Accounted now (a check for the middle of a fault, not convergence): every
 * process that runs is listed on its node as something that counts (any state,
 * leftovers included), with at least its model's configured size.
 */
export function accountingProblems(v: ClusterView): string[] {
  const problems: string[] = [];
  for (const r of v.running) {
    const row = v.rows.find((x) => x.node === r.nodeId && x.incarnation === r.incarnation);
    if (row === undefined) problems.push(`amnesia: pid ${String(r.pid)} ${r.nodeId}/${r.incarnation} runs but is not accounted`);
    else if (row.sizeBytes < (v.configuredSize.get(row.model) ?? 0n)) problems.push(`${r.nodeId}/${r.incarnation} accounted with ${String(row.sizeBytes)} bytes, below its model's ${String(v.configuredSize.get(row.model))}`);
  }
  return problems;
}

/**
 * Samples accountingProblems over and over (through the faults, not only at
 * the end) until `stop`, which returns every problem seen (each once) and how
 * many observations were made. `onlyNode` limits the check to one node's
 * processes (e.g. after a coordinator restart, before the other nodes registered
 * — what a coordinator cannot know yet is not amnesia).
 */
const watches = new Set<() => void>();

/** Ends every watch still running (for afterEach, when a test failed before its `stop`). */
export function endWatches(): void {
  for (const end of watches) end();
  watches.clear();
}

export function watchAccounting(admin: () => Client<typeof AdminService>, tagPrefix: string, onlyNode?: string): { stop(): Promise<{ problems: string[]; samples: number }> } {
  const problems = new Set<string>();
  let samples = 0;
  const state = { on: true };
  const end = (): void => {
    state.on = false;
  };
  watches.add(end);
  const loop = (async () => {
    while (state.on) {
      const v = await observe(admin(), tagPrefix).catch(() => undefined);
      if (v !== undefined) {
        samples++;
        const scoped = onlyNode === undefined ? v : { ...v, running: v.running.filter((r) => r.nodeId === onlyNode) };
        for (const p of accountingProblems(scoped)) problems.add(p);
      }
      await new Promise((r) => setTimeout(r, 150));
    }
  })();
  return {
    async stop() {
      end();
      watches.delete(end);
      await loop;
      return { problems: [...problems], samples };
    },
  };
}

const evictionTypes = new Set(["eviction.started", "eviction.stopped", "eviction.failed"]);

/** Events of the stream with each id once (the first copy), in stream order; and how many copies were dropped. */
export function dedupById(events: readonly Event[]): { events: Event[]; duplicates: number } {
  const seen = new Set<string>();
  const out: Event[] = [];
  for (const e of events) {
    if (seen.has(e.id)) continue;
    seen.add(e.id);
    out.push(e);
  }
  return { events: out, duplicates: events.length - out.length };
}

/**
 * What is wrong with the audit trail (empty when nothing), on the stream's
 * events after de-duplication by id:
 * - every event a coordinator logged is on the stream (nothing lost);
 * - per incarnation, events follow their sequence (coordinator epoch, n) in stream order;
 * - per incarnation, each eviction.started is closed by exactly one eviction.stopped or
 *   eviction.failed before the next starts, none closes what was not started, none is left open;
 * - an eviction that failed as a leftover is later reaped (leftover.reaped) or its node lost.
 */
export function auditProblems(stream: readonly Event[], logged: readonly LoggedEvent[]): string[] {
  const problems: string[] = [];
  const { events } = dedupById(stream);
  const ids = new Set(events.map((e) => e.id));
  for (const l of logged) if (typeof l["id"] !== "string" || !ids.has(l["id"])) problems.push(`lost: ${l.type} ${String(l["id"])} (${String(l.incarnation)}) was logged but is not on the stream`);
  const byInc = new Map<string, Event[]>();
  for (const e of events) {
    if (e.incarnation === "") continue;
    const list = byInc.get(e.incarnation) ?? [];
    list.push(e);
    byInc.set(e.incarnation, list);
  }
  for (const [inc, list] of byInc) {
    for (let i = 1; i < list.length; i++) {
      const a = list[i - 1]?.sequence;
      const b = list[i]?.sequence;
      if (a === undefined || b === undefined) problems.push(`${inc}: an event without a sequence`);
      else if (b.epoch < a.epoch || (b.epoch === a.epoch && b.n <= a.n)) problems.push(`${inc}: ${eventTypeOf(list[i]!)} (${String(b.epoch)}, ${String(b.n)}) after (${String(a.epoch)}, ${String(a.n)})`);
    }
    let open = false;
    let leftover = false;
    for (const e of list) {
      const t = eventTypeOf(e);
      if (t === "eviction.started") {
        if (open) problems.push(`${inc}: a second eviction.started while one is open (no single-flight)`);
        open = true;
      } else if (evictionTypes.has(t)) {
        if (!open) problems.push(`${inc}: ${t} without an open eviction.started`);
        open = false;
        if (e.payload.case === "evictionFailed" && e.payload.value.outcome === EvictionFailedOutcome.LEFTOVER) leftover = true;
      } else if (t === "leftover.reaped") {
        if (!leftover) problems.push(`${inc}: leftover.reaped of no leftover`);
        leftover = false;
      }
    }
    if (open) problems.push(`${inc}: eviction.started never closed by stopped or failed`);
    const lost = events.some((e) => eventTypeOf(e) === "node.lost" && e.nodeId === list[0]?.nodeId);
    if (leftover && !lost) problems.push(`${inc}: a leftover never reaped`);
  }
  return problems;
}

/** Waits until the stream holds every logged event, then asserts auditProblems is empty; returns the de-duplicated stream. */
export async function untilAuditComplete(natsUrl: string, logged: () => readonly LoggedEvent[], timeoutMs = 60_000): Promise<{ events: Event[]; duplicates: number }> {
  const end = Date.now() + timeoutMs;
  let readError = "none";
  for (;;) {
    const stream =
      (await storedEvents(natsUrl).catch((err: unknown) => {
        readError = err instanceof Error ? err.message : String(err);
        return undefined;
      })) ?? [];
    const problems = auditProblems(stream, logged());
    if (problems.length === 0) return dedupById(stream);
    if (Date.now() > end) expect(problems, `audit trail incomplete (${String(stream.length)} events read; last read error: ${readError})`).toEqual([]);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Types of the (de-duplicated) events naming `incarnation`, in stream order. */
export function typesOf(events: readonly Event[], incarnation: string): string[] {
  return events.filter((e) => e.incarnation === incarnation).map((e) => eventTypeOf(e));
}
