/**
 * Starts a real coordinator (in this test process) with an embedded agent
 * that spawns real backend-sim processes, on a random loopback port and a
 * random backend port range, with short timeouts. Tests talk to it over real
 * gRPC through the returned clients.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient, type Client } from "@warden/grpc";
import { AdminService, InferenceService, type Event } from "@warden/proto";
import { eventTypeOf } from "@warden/events";
import type { Logger } from "@warden/common";
import { testPortRange } from "./port-range.js";
import { resolveCoordinatorConfig, startCoordinator, type Coordinator } from "@warden/coordinator";

export interface TestCoordinatorOptions {
  models: Record<string, unknown>[];
  policy?: Record<string, unknown>;
  stop?: Record<string, unknown>;
  /** Extra embedded-agent config (merged over the test defaults). */
  agent?: Record<string, unknown>;
  embeddedAgent?: boolean;
  extra?: Record<string, unknown>;
  /** Where the coordinator logs (e.g. a recordingLogger); nowhere by default. */
  logger?: Logger;
}

export interface TestCoordinator {
  readonly c: Coordinator;
  readonly admin: Client<typeof AdminService>;
  readonly inference: Client<typeof InferenceService>;
  readonly dir: string;
  /** Every event the coordinator emitted since start. */
  readonly events: Event[];
  /** Resolves with the first event of `type` matching `pred` (already seen or future). */
  waitForEvent(type: string, pred?: (e: Event) => boolean, timeoutMs?: number): Promise<Event>;
  close(): Promise<void>;
}

/** A backend port range for this test worker (see port-range.ts). */
export function randomPortRange(size = 40): { min: number; max: number } {
  return testPortRange(size);
}

export async function startTestCoordinator(o: TestCoordinatorOptions): Promise<TestCoordinator> {
  const dir = await mkdtemp(join(tmpdir(), "warden-coord-"));
  const config = resolveCoordinatorConfig({
    listen: "127.0.0.1:0",
    stateDir: dir,
    embeddedAgent: o.embeddedAgent ?? true,
    agent: {
      nodeId: "local",
      ports: { ...randomPortRange(), quarantine: "1s" },
      readiness: { attempts: 100, interval: "200ms", initialInterval: "20ms" },
      grace: "3s",
      nvidiaSmi: "",
      catalog: { "backend-sim": { builtin: "backend-sim" } },
      ...o.agent,
    },
    policy: { tickInterval: "100ms", enforcementRetries: 60, enforcementRetryInterval: "250ms", ...o.policy },
    stop: { timeout: "10s", rpcTimeout: "8s", ...o.stop },
    recoveryWindow: "500ms",
    models: o.models,
    ...o.extra,
  });
  const c = await startCoordinator(config, o.logger === undefined ? {} : { logger: o.logger });
  const events: Event[] = [];
  const waiters = new Set<() => void>();
  const ctl = new AbortController();
  void (async () => {
    try {
      for await (const e of c.hub.watch({}, ctl.signal)) {
        events.push(e);
        for (const w of waiters) w();
      }
    } catch {
      // closed
    }
  })();
  const admin = createClient(AdminService, c.address);
  const inference = createClient(InferenceService, c.address);
  return {
    c,
    admin,
    inference,
    dir,
    events,
    waitForEvent(type, pred = () => true, timeoutMs = 30_000) {
      return new Promise<Event>((resolve, reject) => {
        const check = (): boolean => {
          const hit = events.find((e) => eventTypeOf(e) === type && pred(e));
          if (hit === undefined) return false;
          waiters.delete(check);
          clearTimeout(timer);
          resolve(hit);
          return true;
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`no ${type} event within ${String(timeoutMs)}ms; saw: ${events.map((e) => eventTypeOf(e)).join(", ")}`));
        }, timeoutMs);
        waiters.add(check);
        check();
      });
    },
    async close() {
      ctl.abort();
      admin.close();
      inference.close();
      await c.close({ stopBackends: true });
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Model config for backend-sim with `sim.*` knobs. */
export function simModel(id: string, extra: { groups?: string[]; pinned?: boolean; knobs?: Record<string, string | number | boolean>; memoryEstimate?: string; selector?: Record<string, string>; loadTimeout?: string } = {}): Record<string, unknown> {
  return {
    id,
    backend: "backend-sim",
    options: Object.entries(extra.knobs ?? {}).map(([k, v]) => `sim.${k}:${String(v)}`),
    ...(extra.groups === undefined ? {} : { groups: extra.groups }),
    ...(extra.pinned === undefined ? {} : { pinned: extra.pinned }),
    ...(extra.memoryEstimate === undefined ? {} : { memoryEstimate: extra.memoryEstimate }),
    ...(extra.selector === undefined ? {} : { selector: extra.selector }),
    ...(extra.loadTimeout === undefined ? {} : { loadTimeout: extra.loadTimeout }),
  };
}

/** Polls `fn` until it returns a truthy value (generous deadline, no timing assertions). */
export async function until<T>(what: string, fn: () => Promise<T | undefined | false> | T | undefined | false, timeoutMs = 30_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
