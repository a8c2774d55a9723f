/**
 * The HA nemesis, real processes throughout: three nats-server in a JetStream
 * cluster, three `warden coordinator --ha` members, two agents following all
 * three, backend-sim backends. Under steady inference load (three callers
 * through the project's leader-following client, every outcome recorded) a
 * seeded sequence of faults runs: kill -9 of the leader (started again as a
 * standby), SIGSTOP/SIGCONT of the leader, kill -9 of a nats-server (the one
 * leading the lease bucket's stream included; restarted), SIGSTOP/SIGCONT of an
 * agent, kill -9 of an agent (started again by the test on the same state dir,
 * as a supervisor would: it adopts the backends its predecessor left running).
 * Besides the gRPC callers, one HTTP caller posts chat completions to the
 * members' OpenAI API and follows the leader as a standby's 503 tells it to
 * (http-leader-caller.ts). The seed decides every fault (WARDEN_NEMESIS_SEED replays it;
 * WARDEN_NEMESIS_FAULTS adds more); the checks read ground truth only
 * (nemesis-checks.ts): the process table sampled every 200 ms and the audit
 * stream read by a plain JetStream consumer.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it, onTestFailed } from "vitest";
import { Code, WardenError } from "@warden/common";
import { createLeaderFollowingClient } from "@warden/grpc";
import { AdminService, InferenceService, InstanceState } from "@warden/proto";
import { liveTaggedSims, uniqueTag } from "./support/agent-harness.js";
import { liveRemoteAgents } from "./support/agent-process.js";
import { readAuditStream } from "./support/audit-consumer.js";
import { convergenceProblems, observe } from "./support/chaos-checks.js";
import { simModel } from "./support/coordinator-harness.js";
import { disappearanceProblems, exclusivityProblems, historyOf, modelsOfIncarnations, streamProblems } from "./support/nemesis-checks.js";
import { startNemesisCluster, type NemesisCluster, type NemesisMember } from "./support/nemesis-cluster.js";
import { createHttpLeaderCaller, longestOutageMs, type HttpCallOutcome } from "./support/http-leader-caller.js";
import { nemesisPlan, nemesisSeed, type Fault } from "./support/nemesis-plan.js";
import { sampleProcesses } from "./support/process-sampler.js";

const seed = nemesisSeed(process.env, 26);
const plan = nemesisPlan({ seed, servers: 3, agents: 2, faults: Number(process.env["WARDEN_NEMESIS_FAULTS"] ?? "8") });
const tag = uniqueTag("ha-nemesis");
const groups = new Map<string, readonly string[]>([["gx1", ["excl"]], ["gx2", ["excl"]]]);
const models = [
  // Two replicas, kept by their floor through idle timeouts.
  { ...simModel("rep"), replicas: { min: 2, max: 2 } },
  // The exclusive pair on one node.
  simModel("gx1", { groups: ["excl"], selector: { node: "a" } }),
  simModel("gx2", { groups: ["excl"], selector: { node: "a" } }),
  simModel("solo-b", { selector: { node: "b" } }),
];

let cluster: NemesisCluster | undefined;
const clients: { close(): void }[] = [];

afterEach(async () => {
  for (const cl of clients.splice(0)) cl.close();
  await cluster?.close();
  cluster = undefined;
}, 120_000);

afterAll(async () => {
  expect(await liveTaggedSims(tag)).toEqual([]);
  expect(await liveRemoteAgents()).toEqual([]);
});

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function describeFault(f: Fault): string {
  const target = f.kind === "nats-kill" ? ` n${String(f.server)}` : f.kind === "agent-pause" || f.kind === "agent-kill" ? ` ${["a", "b"][f.agent] ?? "?"}` : "";
  return `${f.kind}${target} ${String(f.holdMs)}ms`;
}

interface CallOutcome {
  readonly model: string;
  /** "ok", or the gRPC code's name ("Unavailable"…), or "non-Warden error". */
  readonly outcome: string;
  readonly message: string;
  readonly endedAtMs: number;
}

function codeName(code: number): string {
  return Object.entries(Code).find(([, v]) => v === code)?.[0] ?? `code ${String(code)}`;
}

/**
 * What a call may end with through failovers: UNAVAILABLE (no leader yet, a
 * dying one), a deadline, or a load-failure cooldown (it names its retry
 * time). Anything else — FailedPrecondition (the CLI's exit 7, "never"),
 * Canceled — is a verdict a script would wrongly trust.
 */
const transientOutcomes = new Set(["ok", codeName(Code.Unavailable), codeName(Code.DeadlineExceeded), codeName(Code.ResourceExhausted)]);

/**
 * The same for the HTTP caller: 503 UNAVAILABLE (a standby, a leader taking
 * over), 504, 429 (a load-failure cooldown), a member that answered nothing or
 * dropped the connection (killed, paused), the caller's deadline. Any other
 * status — 503 FAILED_PRECONDITION, 500, 4xx — is a verdict a client would trust.
 */
function httpTransient(kind: string): boolean {
  return kind === "ok" || kind === "503" || kind === "503 unavailable" || kind.startsWith("504") || kind.startsWith("429") || !/^\d/.test(kind);
}

/** At most 12 lines per finding, then how many more: a stale leader's every event is one line. */
function capped(lines: readonly string[]): string[] {
  return lines.length <= 12 ? [...lines] : [...lines.slice(0, 12), `… and ${String(lines.length - 12)} more`];
}

describe("HA nemesis: seeded faults under load, checked against the process table and the audit stream", { timeout: 600_000 }, () => {
  it(`seed ${String(seed)}: ${String(plan.length)} faults; no group overlap, no undecided stop, no stale or lost audit event, no member exit, listing = processes at the end`, async () => {
    console.log(`ha-nemesis: seed ${String(seed)} (replay: WARDEN_NEMESIS_SEED=${String(seed)} npx vitest run --project main test/ha-nemesis.test.ts): ${plan.map(describeFault).join(", ")}`);
    const c = await startNemesisCluster({
      name: "ha-nemesis",
      members: 3,
      config: {
        nodeGrace: "5s",
        // An orphan (a backend an agent killed mid-start leaves without a record) is stopped soon, so the end can converge.
        orphanGrace: "3s",
        policy: { tickInterval: "100ms", idleCheck: true, idleTimeout: "3s", enforcementRetries: 600, enforcementRetryInterval: "250ms" },
        // Loads wait out a fault's unreachable nodes as long as the retries above allow.
        loadWait: "150s",
        stop: { timeout: "10s", rpcTimeout: "2s" },
        models,
      },
    });
    cluster = c;
    onTestFailed(() => {
      console.error(`ha-nemesis failed with seed ${String(seed)}; replay: WARDEN_NEMESIS_SEED=${String(seed)}`);
      for (const m of c.members) {
        // Leadership lines first (a flood of later lines must not hide why no member led), then the tail.
        const ha = m.lines.filter((l) => typeof l["component"] === "string" && l["component"].startsWith("ha")).slice(-80);
        console.error(`--- member ${String(m.index)}, its leadership lines:\n${ha.map((l) => JSON.stringify(l)).join("\n")}`);
        console.error(`--- member ${String(m.index)}, last log lines:\n${m.lines.slice(-60).map((l) => JSON.stringify(l)).join("\n")}`);
      }
      // WARDEN_NEMESIS_LOG_DIR: every member's whole log and each agent's, for reading a finding in order.
      const logDir = process.env.WARDEN_NEMESIS_LOG_DIR;
      if (logDir !== undefined && logDir !== "") {
        mkdirSync(logDir, { recursive: true });
        for (const m of c.members) writeFileSync(join(logDir, `seed-${String(seed)}-member-${String(m.index)}.jsonl`), m.lines.map((l) => JSON.stringify(l)).join("\n"));
        for (const a of c.agents) writeFileSync(join(logDir, `seed-${String(seed)}-agent-${a.nodeId}.jsonl`), a.proc.lines.join("\n"));
        console.error(`ha-nemesis: whole logs written to ${logDir}`);
      }
      // What each agent process found at its start (adopted, forgot, stopped unfinished, orphans): an agent killed -9 is known by these.
      for (const a of c.agents) console.error(`--- agent ${a.nodeId} (current process), its start:\n${a.proc.lines.filter((l) => /adopt|orphan|forgot|unfinished|record/i.test(l)).slice(0, 40).join("\n")}`);
    });
    await c.addAgent("a", tag);
    await c.addAgent("b", tag);
    const admin = createLeaderFollowingClient(AdminService, c.addresses);
    const inference = createLeaderFollowingClient(InferenceService, c.addresses);
    clients.push(admin, inference);

    // Ground truth from here on; the listing is polled only to name the model of a starting incarnation.
    const sampler = sampleProcesses(tag, 200);
    const listedModel = new Map<string, string>();
    const run = { on: true };
    const poller = (async () => {
      while (run.on) {
        const r = await admin.listModels({}, { timeoutMs: 3_000 }).catch(() => undefined);
        for (const i of r?.instances ?? []) listedModel.set(i.incarnation, i.model);
        await sleep(500);
      }
    })();
    const calls: CallOutcome[] = [];
    const call = async (model: string): Promise<void> => {
      try {
        await inference.predict({ model, options: { Prompt: "hi", Tokens: 1 } }, { timeoutMs: 15_000 });
        calls.push({ model, outcome: "ok", message: "", endedAtMs: Date.now() });
      } catch (err) {
        calls.push({ model, outcome: err instanceof WardenError ? codeName(err.code) : "non-Warden error", message: err instanceof Error ? err.message : String(err), endedAtMs: Date.now() });
      }
    };
    // Steady load: replicas routed; the group pair switched on every call (a group eviction each time); a model left idle past its timeout.
    const http = createHttpLeaderCaller({ urls: c.httpUrls });
    const httpCalls: HttpCallOutcome[] = [];
    const loadStartMs = Date.now();
    const callers = [
      // The HTTP caller: chat completions on the replicated model, through whichever member leads.
      (async () => {
        while (run.on) {
          httpCalls.push(await http.post("/v1/chat/completions", { model: "rep", messages: [{ role: "user", content: "hi" }], max_tokens: 1 }, 15_000));
          await sleep(300);
        }
      })(),
      (async () => {
        while (run.on) {
          await call("rep");
          await sleep(200);
        }
      })(),
      (async () => {
        for (let i = 0; run.on; i++) {
          await call(i % 2 === 0 ? "gx1" : "gx2");
          await sleep(300);
        }
      })(),
      (async () => {
        while (run.on) {
          await call("solo-b");
          await call("rep");
          await sleep(4_000);
        }
      })(),
    ];

    const livenessProblems: string[] = [];
    // Each wait for a leader is bounded at 60 s, and at 15 s once one has failed: a run without a leader ends, and reports, in minutes.
    const leaderWaitMs = (): number => (livenessProblems.length === 0 ? 60_000 : 15_000);
    const applied: string[] = [];
    for (const [k, f] of plan.entries()) {
      const waitMs = leaderWaitMs();
      const lead = await c.leader(waitMs).catch(() => undefined);
      if (lead === undefined && (f.kind === "leader-kill" || f.kind === "leader-pause")) {
        livenessProblems.push(`fault ${String(k)} (${f.kind}): no agreed leader to target within ${String(waitMs / 1000)} s`);
        continue;
      }
      const sampledFrom = sampler.count();
      switch (f.kind) {
        case "leader-kill": {
          await lead!.member.kill();
          await sleep(f.holdMs);
          // Back as a standby, in the background: the next fault need not wait for its start.
          void lead!.member.start().catch((err: unknown) => livenessProblems.push(`member ${String(lead!.member.index)} did not start again: ${String(err)}`));
          break;
        }
        case "leader-pause":
          lead!.member.pause();
          await sleep(f.holdMs);
          lead!.member.resume();
          break;
        case "nats-kill-lease-leader":
        case "nats-kill": {
          const server = f.kind === "nats-kill" ? f.server : await c.streamLeader("KV_warden-leader", 30_000);
          await c.nats.kill(server);
          await sleep(f.holdMs);
          await c.nats.restart(server);
          break;
        }
        case "agent-pause": {
          const agent = c.agents[f.agent]!;
          agent.pause();
          await sleep(f.holdMs);
          agent.resume();
          break;
        }
        case "agent-kill": {
          const agent = c.agents[f.agent]!;
          await agent.kill();
          await sleep(f.holdMs);
          // Started again at once, as a supervisor would; its start is bounded (30 s) and a failure is a finding.
          await agent.restart().catch((err: unknown) => livenessProblems.push(`agent ${agent.nodeId} did not start again after kill -9: ${String(err)}`));
          break;
        }
      }
      // Sample numbers, not times: where in the process record each fault sat.
      applied.push(`${describeFault(f)} [samples ${String(sampledFrom)}–${String(sampler.count())}]`);
      // A member that exited on its own is recorded (c.exits) and started again so the run goes on.
      for (const m of c.members) if (!m.running()) void m.start().catch(() => undefined);
      const afterMs = leaderWaitMs();
      await c.leader(afterMs).catch(() => livenessProblems.push(`after fault ${String(k)} (${describeFault(f)}): no agreed leader within ${String(afterMs / 1000)} s`));
      await sleep(f.gapMs);
    }

    run.on = false;
    await Promise.all([...callers, poller]);
    const loadEndMs = Date.now();
    await Promise.all(c.members.map((m) => m.settled()));

    // Quiescence: the listing and the processes agree (nothing runs that the listing lacks, nothing listed that does not run).
    let lastConvergence: string[] = ["not observed"];
    const convergeEnd = Date.now() + (livenessProblems.length === 0 ? 90_000 : 20_000);
    while (Date.now() < convergeEnd) {
      const v = await observe(admin, tag).catch(() => undefined);
      lastConvergence = v === undefined ? ["the Admin API did not answer"] : convergenceProblems(v, ["a", "b"]);
      if (lastConvergence.length === 0) break;
      await sleep(250);
    }
    const sampled = await sampler.stop();

    // Every event the member leading now logged in its current term must reach the stream (it holds the
    // lease, nothing fences it): wait for its outbox to catch up, bounded, before judging the stream.
    // What the same process logged in an earlier term, after that term's lease lapsed, is an ex-leader's
    // and is refused by the journal's fence by design (seed 26: member 1 lost epoch 155 with loads in
    // flight, logged their backend.loaded while paused, and led again at epoch 204; the new terms adopted
    // those instances from the nodes' inventories and said so on the stream).
    const finalLeader = await c.leader(leaderWaitMs()).catch(() => undefined);
    const loggedIds = (m: NemesisMember | undefined): string[] => {
      if (m === undefined) return [];
      const own = m.lines.filter((l) => l["pid"] === m.pid());
      const termFrom = own.findLastIndex((l) => l["component"] === "ha" && l["msg"] === "leading");
      return own.slice(Math.max(0, termFrom)).filter((l) => String(l["msg"]).startsWith("event ")).map((l) => String((l["event"] as Record<string, unknown> | undefined)?.["id"]));
    };
    let stream = await readAuditStream(c.nats.urls);
    let unpublished: string[];
    const publishEnd = Date.now() + 60_000;
    for (;;) {
      const onStream = new Set(stream.map((x) => x.event.id));
      unpublished = loggedIds(finalLeader?.member).filter((id) => !onStream.has(id));
      if (unpublished.length === 0 || Date.now() > publishEnd) break;
      await sleep(2_000);
      stream = await readAuditStream(c.nats.urls);
    }
    const onStreamAll = new Set(stream.map((x) => x.event.id));
    const loggedNotOnStream = c.members.flatMap((m) => m.lines.filter((l) => String(l["msg"]).startsWith("event ")).map((l) => String((l["event"] as Record<string, unknown> | undefined)?.["id"]))).filter((id) => !onStreamAll.has(id)).length;
    const verdict = streamProblems(stream);
    const modelOf = new Map([...listedModel, ...modelsOfIncarnations(stream)]);
    const gone = disappearanceProblems(sampled.disappeared, stream);
    const unknownModel = [...sampled.seen.values()].filter((b) => !modelOf.has(b.incarnation)).length;
    const byCode = new Map<string, number>();
    for (const x of calls) byCode.set(x.outcome, (byCode.get(x.outcome) ?? 0) + 1);
    const byKind = new Map<string, number>();
    for (const x of httpCalls) byKind.set(x.kind, (byKind.get(x.kind) ?? 0) + 1);
    const outageS = (xs: readonly { ok: boolean; endedAtMs: number }[]): string => (longestOutageMs(xs, loadStartMs, loadEndMs) / 1000).toFixed(1);
    const ready = (await admin.listModels({}, { timeoutMs: 10_000 }).catch(() => ({ instances: [] }))).instances.filter((i) => i.state === InstanceState.READY).length;
    console.log([
      `ha-nemesis summary (seed ${String(seed)}):`,
      `  faults applied ${String(applied.length)}/${String(plan.length)}: ${applied.join(", ")}`,
      `  gRPC calls ${String(calls.length)}: ${[...byCode].map(([k, n]) => `${k} ${String(n)}`).join(", ")}; longest stretch without a successful call ${outageS(calls.map((x) => ({ ok: x.outcome === "ok", endedAtMs: x.endedAtMs })))} s`,
      `  HTTP calls ${String(httpCalls.length)} (${String(httpCalls.reduce((n, x) => n + x.attempts, 0))} requests): ${[...byKind].map(([k, n]) => `${k} ${String(n)}`).join(", ")}; longest stretch without a successful call ${outageS(httpCalls.map((x) => ({ ok: x.kind === "ok", endedAtMs: x.endedAtMs })))} s`,
      `  audit events read ${String(stream.length)} (${String(verdict.events)} distinct, ${String(verdict.duplicates)} duplicates); lease epochs announced: ${verdict.leaderEpochs.map(String).join(" ")}; logged by any member but not on the stream: ${String(loggedNotOnStream)}`,
      `  process samples ${String(sampled.samples.length)}; backends seen ${String(sampled.seen.size)} (model unknown for ${String(unknownModel)}), stopped ${String(sampled.disappeared.length)} (${String(gone.evicted)} by an eviction, ${String(gone.orphansStopped)} of them orphans; ${String(gone.failedStarts)} starts that never became ready); ready at the end ${String(ready)}`,
      `  members that exited on their own: ${String(c.exits.length)}`,
    ].join("\n"));

    const findings = {
      "two members of one exclusive group alive on one node (process table)": exclusivityProblems(sampled.samples, modelOf, groups).map((p) => `${p}; their events: ${[...p.matchAll(/\/([0-9A-Z]{26}) /g)].map((m) => `${m[1] ?? ""}: ${historyOf(stream, m[1] ?? "")}`).join("; ")}`),
      "a backend stopped without an eviction decision of the epoch in force (process table + audit stream)": gone.problems,
      "audit stream: an older epoch after a newer one, a duplicate id, or a sequence gap": verdict.problems,
      "audit stream: events the leader logged still not on it 60 s after quiescence": unpublished.length === 0 ? [] : [`${String(unpublished.length)} events of member ${String(finalLeader?.member.index)}, e.g. ${unpublished.slice(0, 3).join(", ")}`],
      "a member exited without being killed (a failed takeover must return to standby)": c.exits.map((e) => `member ${String(e.member)} exited (code ${String(e.code)}, signal ${String(e.signal)}); its last lines:\n${e.lastLines.slice(-6).join("\n")}`),
      "no agreed leader (liveness: 60 s bounds, 15 s after a first miss)": livenessProblems,
      "a call failed with a permanent code (a failover state must answer UNAVAILABLE)": [...new Set(calls.filter((x) => !transientOutcomes.has(x.outcome)).map((x) => `${x.model}: ${x.outcome} ${x.message.slice(0, 160)}`))],
      "an HTTP call failed with a permanent status (a failover state must answer 503 UNAVAILABLE)": [...new Set(httpCalls.filter((x) => !httpTransient(x.kind)).map((x) => `${x.kind} ${x.message.slice(0, 160)}`))],
      "after quiescence, the listing and the running processes differ": lastConvergence,
    };
    const shown = Object.fromEntries(Object.entries(findings).map(([k, v]) => [k, capped(v)]));
    console.log(`ha-nemesis checks (seed ${String(seed)}): ${Object.entries(findings).map(([k, v]) => `${v.length === 0 ? "held" : `FAILED ×${String(v.length)}`}: ${k}`).join("; ")}`);
    expect(shown).toEqual(Object.fromEntries(Object.keys(findings).map((k) => [k, []])));
    // The load ran and the faults were all applied: a run that did nothing must not pass.
    expect(applied.length).toBe(plan.length);
    expect(calls.filter((x) => x.outcome === "ok").length).toBeGreaterThan(0);
    expect(httpCalls.filter((x) => x.kind === "ok").length).toBeGreaterThan(0);
  });
});
