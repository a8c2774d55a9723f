import { Code, WardenError } from "@warden/common";
import type { StopAnswer } from "@warden/loader";
import type { SimWorld } from "./sim-world.js";
import type { AgentRecord } from "./sim-agent-types.js";

/** What a stop needs of its agent: the world, a timer of the agent's boot, and the record's exit. */
export interface StopContext {
  readonly w: SimWorld;
  after(ms: number, label: string, fn: () => void): void;
  exit(r: AgentRecord, signal: string): void;
}

/**
 * The agent's stop of one record: SIGKILL at once when forced, else SIGTERM,
 * then SIGKILL after the grace (a process that ignores SIGTERM, or exits too
 * late, is killed); a process that will not die fails the stop.
 */
export function runStop(agent: StopContext, r: AgentRecord, force: boolean): Promise<StopAnswer> {
  r.state = "stopping";
  return new Promise<StopAnswer>((resolve, reject) => {
    const p = r.process;
    const kill = (): void => {
      if (agent.w.clock.now() < p.unkillableUntilMs) {
        r.state = "ready";
        agent.w.coverage.hit("stop.will-not-die");
        reject(new WardenError(Code.Internal, `process ${String(p.pid)} will not die`));
        return;
      }
      agent.w.truth.kill(p, agent.w.clock.now());
      agent.exit(r, "SIGKILL");
      resolve({ t: "stopped" });
    };
    if (force) {
      kill();
      return;
    }
    const termMs = p.behaviour.ignoresSigterm ? undefined : agent.w.rng.int(50, 3_000);
    const graceMs = agent.w.opts.sigtermGraceMs;
    if (termMs !== undefined && termMs < graceMs) {
      agent.after(termMs, "backend.sigterm-exit", () => {
        if (p.phase === "dead") {
          resolve({ t: "stopped" });
          return;
        }
        agent.w.truth.kill(p, agent.w.clock.now());
        agent.exit(r, "SIGTERM");
        resolve({ t: "stopped" });
      });
    } else {
      agent.after(graceMs, "backend.sigkill", () => {
        agent.w.coverage.hit("stop.sigkill");
        if (p.phase === "dead") resolve({ t: "stopped" });
        else kill();
      });
    }
  });
}
