import type { AgentPort, StopAnswer, StopRequest } from "./ports.js";

/**
 * The StopBackend RPCs in flight, by incarnation (invariant 7: at most one
 * stop in flight per instance). A stop of an incarnation whose RPC is still
 * out joins it rather than sending a second: an operator's forget drops the
 * loader's records but cannot recall an RPC already sent, and the instance
 * re-adopted from the next inventory must not be stopped (or routed) twice.
 */
export class StopRpcs {
  private readonly inFlight = new Map<string, Promise<StopAnswer>>();

  /** True while a StopBackend for this incarnation awaits its answer. */
  has(incarnation: string): boolean {
    return this.inFlight.has(incarnation);
  }

  /** Sends the stop, or joins the one in flight for the same incarnation. */
  send(agent: AgentPort, request: StopRequest, options: { readonly signal: AbortSignal; readonly timeoutMs: number }): Promise<StopAnswer> {
    const open = this.inFlight.get(request.incarnation);
    if (open !== undefined) return open;
    const p = agent.stopBackend(request, options);
    this.inFlight.set(request.incarnation, p);
    const done = (): void => {
      if (this.inFlight.get(request.incarnation) === p) this.inFlight.delete(request.incarnation);
    };
    p.then(done, done);
    return p;
  }
}
