/**
 * The nemesis test's checker, pure: it reads only ground truth — process
 * samples (process-sampler.ts) and the audit stream as an outside consumer
 * read it (audit-consumer.ts), in stream order — and never a timestamp, so its
 * verdict does not depend on how the run was scheduled.
 *
 * Which epoch is which: `coordinator.leader` names the lease epoch a member won
 * (payload.epoch). Every event also carries `sequence {epoch, n}`, where epoch
 * is the emitting coordinator's outbox epoch — a new one at each takeover,
 * larger than any in the journal — and n counts per incarnation from 1 within
 * that epoch. So events are ordered on sequence.epoch (a newer leader's outbox
 * epoch is larger), and a term's lease epoch is found from the
 * coordinator.leader event carrying its outbox epoch. Each event also names
 * that lease epoch itself (`leader_epoch`; 0 without HA), judged the same way.
 */
import type { Event } from "@warden/proto";
import type { BackendSample, Disappearance } from "./process-sampler.js";
import type { StreamEvent } from "./audit-consumer.js";

/** An incarnation's events on the stream, for a finding: "backendLoaded (epoch E, #stream sequence), …". */
export function historyOf(stream: readonly StreamEvent[], incarnation: string): string {
  return stream.filter((x) => x.event.incarnation === incarnation).map((x) => `${caseOf(x.event)} (epoch ${String(x.event.sequence?.epoch ?? 0n)}, #${String(x.seq)})`).join(", ");
}

/** Never two members of one exclusive group alive on one node in one sample (each pair once, with the first sample it was seen in). */
export function exclusivityProblems(samples: readonly BackendSample[], modelOf: ReadonlyMap<string, string>, groupsOf: ReadonlyMap<string, readonly string[]>): string[] {
  const problems = new Map<string, number>();
  for (const s of samples) {
    const byNodeGroup = new Map<string, Set<string>>();
    for (const b of s.backends) {
      const model = modelOf.get(b.incarnation);
      for (const g of groupsOf.get(model ?? "") ?? []) {
        const key = `${b.nodeId} group ${g}`;
        const set = byNodeGroup.get(key) ?? new Set<string>();
        set.add(`${model ?? "?"}/${b.incarnation} (pid ${String(b.pid)})`);
        byNodeGroup.set(key, set);
      }
    }
    for (const [key, set] of byNodeGroup) {
      const p = `${key}: ${[...set].sort().join(" and ")} alive together`;
      if (set.size > 1 && !problems.has(p)) problems.set(p, s.n);
    }
  }
  return [...problems].map(([p, n]) => `${p} (from sample ${String(n)})`);
}

export interface StreamVerdict {
  readonly problems: string[];
  readonly events: number;
  readonly duplicates: number;
  /** Lease epochs announced by coordinator.leader, in stream order. */
  readonly leaderEpochs: bigint[];
}

function caseOf(e: Event): string {
  return e.payload.case ?? "none";
}

/**
 * The audit stream on its own: no duplicate ids; no event of an older
 * coordinator epoch, nor of an older leader (lease) epoch, after one of a
 * newer (an ex-leader acting after its successor); coordinator.leader lease
 * epochs only grow; per (coordinator
 * epoch, incarnation) the numbers n are 1, 2, 3… with none missing or twice.
 */
export function streamProblems(stream: readonly StreamEvent[]): StreamVerdict {
  const problems: string[] = [];
  const ids = new Set<string>();
  let duplicates = 0;
  let newest: { epoch: bigint; what: string } | undefined;
  let newestLeader: { epoch: bigint; what: string } | undefined;
  let newestLease = 0n;
  const leaderEpochs: bigint[] = [];
  const ns = new Map<string, bigint[]>();
  for (const { seq, event: e } of stream) {
    if (ids.has(e.id)) {
      duplicates++;
      problems.push(`duplicate id ${e.id} (${caseOf(e)}) at stream sequence ${String(seq)}`);
      continue;
    }
    ids.add(e.id);
    const sq = e.sequence;
    if (sq === undefined) {
      problems.push(`${caseOf(e)} ${e.id} at stream sequence ${String(seq)} carries no sequence`);
      continue;
    }
    if (newest !== undefined && sq.epoch < newest.epoch) problems.push(`${caseOf(e)} of ${e.nodeId}/${e.model}/${e.incarnation} (coordinator epoch ${String(sq.epoch)}) at stream sequence ${String(seq)} after ${newest.what} of the newer epoch ${String(newest.epoch)}`);
    if (newest === undefined || sq.epoch > newest.epoch) newest = { epoch: sq.epoch, what: `${caseOf(e)} at stream sequence ${String(seq)}` };
    // The lease epoch each event names (0: emitted without HA, not judged).
    if (e.leaderEpoch > 0n && newestLeader !== undefined && e.leaderEpoch < newestLeader.epoch) problems.push(`${caseOf(e)} of ${e.nodeId}/${e.model}/${e.incarnation} (leader epoch ${String(e.leaderEpoch)}) at stream sequence ${String(seq)} after ${newestLeader.what} of the newer leader epoch ${String(newestLeader.epoch)}`);
    if (e.leaderEpoch > 0n && (newestLeader === undefined || e.leaderEpoch > newestLeader.epoch)) newestLeader = { epoch: e.leaderEpoch, what: `${caseOf(e)} at stream sequence ${String(seq)}` };
    if (e.payload.case === "coordinatorLeader") {
      const lease = e.payload.value.epoch;
      leaderEpochs.push(lease);
      if (lease <= newestLease) problems.push(`coordinator.leader of lease epoch ${String(lease)} (${e.payload.value.holder}) at stream sequence ${String(seq)} after lease epoch ${String(newestLease)}`);
      else newestLease = lease;
    }
    if (e.incarnation !== "") {
      const key = `${String(sq.epoch)} ${e.incarnation}`;
      const list = ns.get(key) ?? [];
      list.push(sq.n);
      ns.set(key, list);
    }
  }
  for (const [key, list] of ns) {
    const sorted = [...list].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    for (let i = 0; i < sorted.length; i++) {
      if (sorted[i] !== BigInt(i + 1)) {
        problems.push(`coordinator epoch/incarnation ${key}: sequence numbers ${sorted.map(String).join(",")} are not 1..${String(sorted.length)} (an event lost or numbered twice)`);
        break;
      }
    }
  }
  return { problems, events: ids.size, duplicates, leaderEpochs };
}

const readyCases = new Set(["backendLoaded", "instanceAdopted", "orphanAdopted"]);

/**
 * Every backend that was ready (loaded or adopted, per the stream) and then
 * disappeared from the process table has an eviction.started for its
 * incarnation, decided in force: at its place in the stream no event of a
 * newer coordinator epoch and no coordinator.leader of a newer lease epoch
 * than its term's came before it. A start that never became ready may vanish
 * without one, and is counted, not flagged: the agent kills a failed start,
 * and an agent started again after kill -9 stops each backend its predecessor
 * had not finished starting (no caller can learn it became ready; its load
 * failed with the old agent's stream, before any backend.loaded). An orphan
 * (a backend with the agent's mark and no record) is named on the stream by
 * its pid, `pid:<n>`, not its incarnation: its eviction.started (reason
 * orphan) is looked up under that name on its node, and judged the same way.
 */
export function disappearanceProblems(gone: readonly Disappearance[], stream: readonly StreamEvent[]): { problems: string[]; failedStarts: number; evicted: number; orphansStopped: number } {
  const problems: string[] = [];
  // Stream position of each first-seen event, and the newest epochs before it.
  const first = new Map<string, { e: Event; newestEpochBefore: bigint; newestLeaseBefore: bigint }>();
  const leaseOfTerm = new Map<bigint, bigint>();
  let newestEpoch = 0n;
  let newestLease = 0n;
  for (const { event: e } of stream) {
    if (first.has(e.id)) continue;
    first.set(e.id, { e, newestEpochBefore: newestEpoch, newestLeaseBefore: newestLease });
    const ep = e.sequence?.epoch ?? 0n;
    if (ep > newestEpoch) newestEpoch = ep;
    if (e.payload.case === "coordinatorLeader") {
      const lease = e.payload.value.epoch;
      if (lease > newestLease) newestLease = lease;
      if (lease > (leaseOfTerm.get(ep) ?? 0n)) leaseOfTerm.set(ep, lease);
    }
  }
  let failedStarts = 0;
  let evicted = 0;
  let orphansStopped = 0;
  for (const d of gone) {
    const mine = [...first.values()].filter((x) => x.e.incarnation === d.incarnation);
    const asOrphan = [...first.values()].filter((x) => x.e.incarnation === `pid:${String(d.pid)}` && x.e.nodeId === d.nodeId && caseOf(x.e) === "evictionStarted");
    const starts = [...mine.filter((x) => caseOf(x.e) === "evictionStarted"), ...asOrphan];
    if (asOrphan.length > 0) orphansStopped++;
    if (starts.length === 0) {
      const history = historyOf(stream, d.incarnation);
      if (mine.some((x) => readyCases.has(caseOf(x.e)))) problems.push(`${d.nodeId}/${d.incarnation} (pid ${String(d.pid)}) was ready and disappeared (between samples ${String(d.lastSeen)} and ${String(d.goneBy)}) with no eviction.started on the stream; its events: ${history}`);
      else failedStarts++;
      continue;
    }
    evicted++;
    for (const s of starts) {
      const ep = s.e.sequence?.epoch ?? 0n;
      const lease = leaseOfTerm.get(ep);
      if (ep < s.newestEpochBefore) problems.push(`${d.nodeId}/${d.incarnation}: stopped by an eviction.started of coordinator epoch ${String(ep)}, emitted after the newer epoch ${String(s.newestEpochBefore)} had spoken`);
      else if (lease !== undefined && lease < s.newestLeaseBefore) problems.push(`${d.nodeId}/${d.incarnation}: stopped by an eviction.started of a term of lease epoch ${String(lease)}, emitted after lease epoch ${String(s.newestLeaseBefore)} was announced`);
    }
  }
  return { problems, failedStarts, evicted, orphansStopped };
}

/** incarnation → model, from every stream event that names both. */
export function modelsOfIncarnations(stream: readonly StreamEvent[]): Map<string, string> {
  const out = new Map<string, string>();
  for (const { event: e } of stream) if (e.incarnation !== "" && e.model !== "") out.set(e.incarnation, e.model);
  return out;
}
