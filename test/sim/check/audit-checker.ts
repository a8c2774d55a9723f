import type { Event } from "@warden/proto";
import type { Checker } from "./checker.js";

/**
 * Invariant 10 at quiescence, as a consumer de-duplicating by event id sees
 * the stream: every event a coordinator committed, and every event durable in
 * the journal, is there; no two distinct events share an instance's
 * `(epoch, n)`; and per instance, sequence order is commit order.
 */
export function auditChecker(): Checker {
  const committed: Event[] = [];
  const seenIds = new Set<string>();
  return {
    name: "audit",
    onEvent(_ctx, e) {
      if (seenIds.has(e.id)) return;
      seenIds.add(e.id);
      committed.push(e);
    },
    atQuiescence(ctx) {
      const w = ctx.world;
      const stream = new Map<string, Event>();
      for (const e of w.nats.stored) if (!stream.has(e.id)) stream.set(e.id, e);
      const copies = w.nats.stored.length - stream.size;
      if (copies > 0) w.coverage.hit("audit.duplicates-deduped", copies);
      // HA: an event a term delivered but never journaled (its append deferred, then the lease
      // lost: the journal's epoch fence refuses it for good) is not owed to the stream — an
      // ex-leader changes nothing. Every journaled one is (below).
      const durable = w.opts.ha === undefined ? undefined : w.disk.durableEventIds();
      for (const e of committed) {
        if (durable !== undefined && !durable.has(e.id)) continue;
        if (!stream.has(e.id)) {
          ctx.report("10 audit completeness", `committed ${e.payload.case ?? "?"} ${e.id} for ${e.incarnation} never reached the stream`);
          return;
        }
      }
      for (const id of w.disk.durableEventIds()) {
        if (!stream.has(id)) {
          ctx.report("10 audit completeness", `durable journal event ${id} never reached the stream`);
          return;
        }
      }
      const bySeq = new Map<string, string>();
      const lastN = new Map<string, bigint>();
      for (const e of committed) {
        const s = e.sequence;
        if (s === undefined || e.incarnation === "") continue;
        const key = `${e.incarnation}/${s.epoch.toString()}/${s.n.toString()}`;
        const prev = bySeq.get(key);
        if (prev !== undefined && prev !== e.id) {
          ctx.report("10 audit completeness", `events ${prev} and ${e.id} share sequence ${key}`);
          return;
        }
        bySeq.set(key, e.id);
        const k2 = `${e.incarnation}/${s.epoch.toString()}`;
        const last = lastN.get(k2);
        if (last !== undefined && s.n <= last) {
          ctx.report("10 audit completeness", `${e.incarnation}: event n=${s.n.toString()} committed after n=${last.toString()} in epoch ${s.epoch.toString()}`);
          return;
        }
        lastN.set(k2, s.n);
      }
    },
  };
}
