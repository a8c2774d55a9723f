import type { Cancel, Clock, Logger } from "@warden/common";
import { RecoveryWindow, type Loader } from "@warden/loader";

/**
 * The recovery window after a start or a takeover (the pure rule is the
 * loader's RecoveryWindow): admission opens once every node the journal names
 * — an instance it last saw alive or an open stop intent there — has reported
 * its first inventory (reconciled: adopted, or known not to run) or has been
 * declared lost, each node waited for at most `windowMs` (`recoveryWindow`).
 * A journal that names no node keeps the fixed wait of `windowMs` (agents it
 * does not know may still bring running backends). Until a node has
 * reported, what the journal says runs there counts on it for placement
 * anyway (unconfirmed instances): the window only decides when loads start,
 * never whether a rule holds. Returns the cancel for close().
 */
export function startRecoveryWindow(o: {
  readonly loader: Pick<Loader, "journalReplicas">;
  readonly clock: Clock;
  readonly log: Logger;
  readonly windowMs: number;
  readonly journaledNodes: Iterable<string>;
  readonly open: () => void;
}): Cancel {
  const startMs = o.clock.now();
  const deadlines = new Map<string, number>();
  for (const nodeId of o.journaledNodes) if (nodeId !== "") deadlines.set(nodeId, startMs + o.windowMs);
  const w = new RecoveryWindow(deadlines, startMs, o.windowMs);
  let timer: Cancel | undefined;
  const finish = (): void => {
    timer?.();
    timer = undefined;
    o.loader.journalReplicas.onNodeSettled(undefined);
    const st = w.state;
    const left = o.loader.journalReplicas.list();
    o.log.info("recovery window over", {
      cause: st.t === "open" ? st.cause : "closed",
      afterMs: o.clock.now() - startMs,
      journaledNodes: deadlines.size,
      notReported: w.lateNodes().slice(0, 32),
      unconfirmedReplicas: left.length,
    });
    o.open();
  };
  const arm = (): void => {
    const next = w.nextDeadlineMs();
    if (next === undefined) return;
    timer = o.clock.setTimer(Math.max(0, next - o.clock.now()), () => {
      timer = undefined;
      if (w.expire(o.clock.now())) finish();
      else arm();
    });
  };
  if (w.open) {
    o.open();
    return () => {};
  }
  if (deadlines.size > 0) {
    o.log.info("recovery window: waiting for the journal's nodes to report", { nodes: [...deadlines.keys()].slice(0, 32), upToMs: o.windowMs });
    o.loader.journalReplicas.onNodeSettled((nodeId) => {
      if (w.settle(nodeId, o.clock.now())) finish();
    });
  }
  arm();
  return () => {
    timer?.();
    timer = undefined;
    o.loader.journalReplicas.onNodeSettled(undefined);
  };
}
