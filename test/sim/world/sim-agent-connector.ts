import { Code, WardenError, abortReason, sleep } from "@warden/common";
import type { AgentPort, FreeAnswer, FreeRequest, StartEvent, StartRequest, StopAnswer, StopRequest } from "@warden/loader";
import type { AgentConnector, BackendExit } from "@warden/cluster";
import type { OrphanProcess } from "@warden/proto";
import type { SimWorld } from "./sim-world.js";
import type { ScopedClock } from "../coordinator/scoped-clock.js";
import type { CoordinatorHooks } from "../coordinator/sim-coordinator.js";

/** The coordinator's client for one simulated agent. */
export interface SimClient {
  readonly nodeId: string;
  closed: boolean;
}

/**
 * One RPC over the simulated network: the request travels coordinator→agent,
 * the answer agent→coordinator. A lost message leaves the caller waiting for
 * its deadline (DEADLINE_EXCEEDED, outcome unknown); a crashed agent with the
 * link up answers UNAVAILABLE (connection refused); an abort is CANCELLED.
 * Answers reaching a crashed coordinator generation are dropped.
 */
function rpc<T>(w: SimWorld, clock: ScopedClock, nodeId: string, what: string, timeoutMs: number, signal: AbortSignal | undefined, send: (reply: (r: T | WardenError) => void) => void, link?: AgentLink): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    // A crashed generation sends nothing (its late promise chains die with it).
    if (!clock.alive()) return;
    let done = false;
    const finish = (f: () => void): void => {
      if (done) return;
      done = true;
      cancelTimer();
      signal?.removeEventListener("abort", onAbort);
      f();
    };
    const cancelTimer = clock.setTimer(timeoutMs, () => {
      finish(() => {
        reject(new WardenError(Code.DeadlineExceeded, `${what}: deadline of ${String(timeoutMs)}ms exceeded`));
      });
    });
    const onAbort = (): void => {
      finish(() => {
        reject(signal === undefined ? new WardenError(Code.Canceled, "cancelled") : abortReason(signal));
      });
    };
    if (signal?.aborted === true) {
      onAbort();
      return;
    }
    signal?.addEventListener("abort", onAbort, { once: true });
    const agent = w.agents.get(nodeId);
    const embedded = agent?.embedded === true;
    toAgent(w, link, nodeId, what, () => {
      const a = w.agents.get(nodeId);
      if (a === undefined || !a.up) {
        w.net.send(nodeId, "toCoordinator", `${what}.refused`, () => {
          clock.run(() => { finish(() => { reject(new WardenError(Code.Unavailable, `${what}: connection refused`)); }); });
        });
        return;
      }
      send((r) => {
        w.net.send(nodeId, "toCoordinator", `${what}.reply`, () => {
          clock.run(() => {
            finish(() => {
              if (r instanceof WardenError) reject(r);
              else resolve(r);
            });
          });
        }, embedded);
      });
    }, embedded);
  });
}

/**
 * One coordinator process's own link to the agents (the HA profile: two
 * coordinators, each with its own connections). `heldUntilMs(nodeId)`: a
 * partition between this process and that agent holds its messages until then
 * (TCP keeps retransmitting: a late command, not a lost one); 0 = up.
 */
export interface AgentLink {
  heldUntilMs(nodeId: string): number;
}

/** Sends coordinator→agent, after this process's own link to the agent lets it through. */
function toAgent(w: SimWorld, link: AgentLink | undefined, nodeId: string, what: string, deliver: () => void, embedded: boolean): void {
  const held = link?.heldUntilMs(nodeId) ?? 0;
  if (held <= w.clock.now()) {
    w.net.send(nodeId, "toAgent", what, deliver, embedded);
    return;
  }
  w.coverage.hit("ha.command-held");
  w.queue.push(held, `${what}.held`, () => {
    toAgent(w, link, nodeId, what, deliver, embedded);
  });
}

/** An async stream fed by network deliveries. */
class StreamQueue<T> implements AsyncIterable<T> {
  private readonly items: T[] = [];
  private ended = false;
  private error: Error | undefined;
  private wake: (() => void) | undefined;

  push(v: T): void {
    this.items.push(v);
    this.wake?.();
  }

  end(err?: Error): void {
    if (this.ended) return;
    this.ended = true;
    this.error = err;
    this.wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    for (;;) {
      const v = this.items.shift();
      if (v !== undefined) {
        yield v;
        continue;
      }
      if (this.ended) {
        if (this.error !== undefined) throw this.error;
        return;
      }
      await new Promise<void>((r) => (this.wake = r));
      this.wake = undefined;
    }
  }
}

/** The AgentPort and AgentConnector the real NodeTable and Loader use in the simulation. */
export function simAgentConnector(w: SimWorld, clock: ScopedClock, hooks: CoordinatorHooks, leaderEpoch: () => bigint = () => 0n, link?: AgentLink): AgentConnector<SimClient> {
  const port = (client: SimClient): AgentPort => ({
    startBackend(req: StartRequest, options: { readonly signal: AbortSignal }): AsyncIterable<StartEvent> {
      const q = new StreamQueue<StartEvent>();
      if (!clock.alive()) return q;
      // Stamped when sent, as agent-port.ts does; an HA term that lost its lease sends nothing (the stream fails).
      let epoch: bigint;
      try {
        epoch = leaderEpoch();
      } catch (err) {
        q.end(WardenError.from(err));
        return q;
      }
      const nodeId = client.nodeId;
      hooks.onStartSent(nodeId, req.model, req.incarnation);
      const embedded = w.agents.get(nodeId)?.embedded === true;
      // A stream whose messages are lost fails like a gRPC stream with keepalive: UNAVAILABLE.
      let lastHeardMs = clock.now();
      let handle: { cancel(): void } | undefined;
      const keepalive = (): void => {
        if (clock.now() - lastHeardMs > w.opts.keepaliveMs) {
          q.end(new WardenError(Code.Unavailable, "StartBackend stream: keepalive timeout"));
          return;
        }
        cancelKeepalive = clock.setTimer(w.opts.keepaliveMs, keepalive);
      };
      let cancelKeepalive = clock.setTimer(w.opts.keepaliveMs, keepalive);
      const onAbort = (): void => {
        cancelKeepalive();
        q.end(abortReason(options.signal));
        toAgent(w, link, nodeId, "start.cancel", () => handle?.cancel(), embedded);
      };
      options.signal.addEventListener("abort", onAbort, { once: true });
      const { behaviour, memoryBytes } = w.backendFor(req.model);
      const stale = w.staleSender(epoch);
      // The stream's messages agent→coordinator. One gRPC stream is one HTTP/2 stream over TCP: its
      // messages arrive in order and none after a lost one (the rest wait, and the keepalive ends the
      // stream UNAVAILABLE, as a broken connection does). Without this, each message had its own
      // delay, and the stream's end overtook its Spawned or Ready: the load "ended without ready",
      // nothing accounted the process that ran on (HA 8, seeds 9, 51, 67, 68, 114). In the HA world
      // only (HaWorld.orderedStartStreams), so the recorded single-coordinator traces are unchanged.
      const ordered = w.opts.ha !== undefined && w.opts.ha.world?.orderedStartStreams !== false;
      let sentSeq = 0;
      let nextSeq = 0;
      const arrived = new Map<number, () => void>();
      const toCoordinator = (label: string, deliver: () => void): void => {
        if (!ordered) {
          w.net.send(nodeId, "toCoordinator", label, deliver, embedded);
          return;
        }
        const seq = sentSeq++;
        w.net.send(nodeId, "toCoordinator", label, () => {
          // A duplicate of a message already delivered or waiting: TCP delivers it once.
          if (seq < nextSeq || arrived.has(seq)) return;
          arrived.set(seq, deliver);
          for (let d = arrived.get(nextSeq); d !== undefined; d = arrived.get(nextSeq)) {
            arrived.delete(nextSeq);
            nextSeq++;
            d();
          }
        }, embedded);
      };
      toAgent(w, link, nodeId, "start", () => {
        const a = w.agents.get(nodeId);
        if (a === undefined || !a.up) {
          w.net.send(nodeId, "toCoordinator", "start.refused", () => {
            clock.run(() => { q.end(new WardenError(Code.Unavailable, "StartBackend: connection refused")); });
          });
          return;
        }
        handle = a.handleStart(
          req,
          {
            emit: (ev) => {
              toCoordinator("start.event", () => {
                clock.run(() => {
                  lastHeardMs = clock.now();
                  q.push(ev);
                });
              });
            },
            end: () => {
              toCoordinator("start.end", () => {
                // Answers reaching a crashed generation are dropped (its load must not resume).
                clock.run(() => {
                  cancelKeepalive();
                  options.signal.removeEventListener("abort", onAbort);
                  q.end();
                });
              });
            },
            fail: (err) => {
              toCoordinator("start.end", () => {
                clock.run(() => {
                  cancelKeepalive();
                  options.signal.removeEventListener("abort", onAbort);
                  q.end(err);
                });
              });
            },
          },
          behaviour,
          memoryBytes,
          epoch,
          stale,
        );
      }, embedded);
      return q;
    },
    stopBackend(req: StopRequest, options: { readonly signal: AbortSignal; readonly timeoutMs: number }): Promise<StopAnswer> {
      let epoch: bigint;
      try {
        epoch = leaderEpoch();
      } catch (err) {
        return Promise.reject(WardenError.from(err));
      }
      const done = hooks.onStopSent(req, client.nodeId);
      const stale = w.staleSender(epoch);
      const p = rpc<StopAnswer>(w, clock, client.nodeId, "stop", options.timeoutMs, options.signal, (reply) => {
        w.agents.get(client.nodeId)?.handleStop(req, reply, epoch, stale);
      }, link);
      p.then(done, done);
      return p;
    },
    freeBackend(req: FreeRequest, options: { readonly signal: AbortSignal; readonly timeoutMs: number }): Promise<FreeAnswer> {
      // Backends without Free (every world but the HA one with `freeReachesBackend`): the
      // agent's `unsupported` comes back after 5 ms with no message drawn — what the loader's
      // own Free cost before it went through the agent, so the recorded traces are unchanged.
      if (w.opts.ha === undefined || w.opts.ha.world?.freeReachesBackend === false) return sleep(clock, 5, options.signal).then(() => ({ t: "unsupported" }));
      let epoch: bigint;
      try {
        epoch = leaderEpoch();
      } catch (err) {
        return Promise.reject(WardenError.from(err));
      }
      const stale = w.staleSender(epoch);
      return rpc<FreeAnswer>(w, clock, client.nodeId, "free", options.timeoutMs, options.signal, (reply) => {
        w.agents.get(client.nodeId)?.handleFree(req, reply, epoch, stale);
      }, link);
    },
    isRunning(incarnation: string, options: { readonly signal: AbortSignal }): Promise<boolean> {
      return rpc<boolean>(w, clock, client.nodeId, "isRunning", 5_000, options.signal, (reply) => {
        w.agents.get(client.nodeId)?.handleIsRunning(incarnation, reply);
      }, link);
    },
  });
  return {
    connect: (address) => ({ nodeId: address.split(":")[0] ?? address, closed: false }),
    agentPort: port,
    close(client) {
      client.closed = true;
    },
    stopOrphan(client, o: OrphanProcess) {
      let epoch: bigint;
      try {
        epoch = leaderEpoch();
      } catch (err) {
        return Promise.reject(WardenError.from(err));
      }
      const stale = w.staleSender(epoch);
      return rpc<{ alreadyGone: boolean }>(w, clock, client.nodeId, "stopOrphan", 30_000, undefined, (reply) => {
        w.agents.get(client.nodeId)?.handleStopOrphan(o.pid, reply, epoch, stale);
      }, link);
    },
    watchExits(nodeId: string, _client: SimClient, signal: AbortSignal, onExit: (incarnation: string, exit: BackendExit) => void) {
      w.exitWatchers.set(nodeId, { signal, onExit, alive: () => clock.alive() && !clock.paused() });
    },
  };
}
