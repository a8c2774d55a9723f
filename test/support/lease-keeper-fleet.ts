/**
 * Lease keepers as child processes (test/support/lease-keeper-child.ts), for
 * tests that kill -9 keepers and nats-servers, and the checker of what they
 * logged: at most one leader per epoch and at most one takeover per revision.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import type { LeaseChildConfig } from "./lease-keeper-child.js";

export interface KeeperEvent {
  readonly ev: "ready" | "leader" | "follower" | "act" | "log";
  readonly epoch?: number;
  /** On "leader": the revision the key was taken from (0: created). */
  readonly from?: number;
  readonly reason?: string;
  readonly wallMs: number;
}

export interface KeeperChild {
  readonly holder: string;
  readonly proc: ChildProcess;
  readonly events: KeeperEvent[];
  /** The first event (from `from` on) matching `pred`; rejects if the child exits first or at the deadline. */
  waitFor(pred: (e: KeeperEvent) => boolean, from?: number, deadlineMs?: number): Promise<KeeperEvent>;
  /** The epoch it leads now (its last role event is "leader"), else undefined. */
  leading(): number | undefined;
  /** Wall time of its last role event ("leader" or "follower"), or of its start. */
  lastRoleChangeMs(): number;
  /** True if it exited without a kill from the test. */
  exitedOnItsOwn(): boolean;
  /** SIGKILL now (the exit is then not "on its own"). */
  kill(): void;
  readonly exited: Promise<void>;
}

const live = new Set<ChildProcess>();
process.on("exit", () => {
  for (const p of live) p.kill("SIGKILL");
});

export function spawnKeeper(servers: readonly string[], bucket: string, holder: string, timing?: LeaseChildConfig["timing"], actEveryMs = 50): KeeperChild {
  const config: LeaseChildConfig = { servers, bucket, holder, actEveryMs, ...(timing === undefined ? {} : { timing }) };
  const proc = spawn(process.execPath, ["--import", "tsx", "test/support/lease-keeper-child.ts"], {
    env: { ...process.env, WARDEN_LEASE_CHILD: JSON.stringify(config) },
    stdio: ["pipe", "pipe", "inherit"],
  });
  live.add(proc);
  const startedMs = Date.now();
  const events: KeeperEvent[] = [];
  const waiters = new Set<() => void>();
  let gone = false;
  let killed = false;
  createInterface({ input: proc.stdout }).on("line", (line) => {
    if (!line.startsWith("{")) return;
    events.push(JSON.parse(line) as KeeperEvent);
    for (const w of [...waiters]) w();
  });
  const exited = new Promise<void>((resolve) => {
    proc.once("exit", () => {
      gone = true;
      live.delete(proc);
      for (const w of [...waiters]) w();
      resolve();
    });
  });
  const lastRole = (): KeeperEvent | undefined => events.findLast((e) => e.ev === "leader" || e.ev === "follower");
  const child: KeeperChild = {
    holder,
    proc,
    events,
    exited,
    leading: () => {
      const e = lastRole();
      return !gone && e?.ev === "leader" ? e.epoch : undefined;
    },
    lastRoleChangeMs: () => lastRole()?.wallMs ?? startedMs,
    exitedOnItsOwn: () => gone && !killed,
    kill: () => {
      killed = true;
      proc.kill("SIGKILL");
    },
    waitFor(pred, from = 0, deadlineMs = 60_000) {
      return new Promise((resolve, reject) => {
        const check = (): void => {
          const hit = events.slice(from).find(pred);
          if (hit !== undefined) done(() => { resolve(hit); });
          else if (gone) done(() => { reject(new Error(`${holder} exited before the awaited event`)); });
        };
        const timer = setTimeout(() => {
          done(() => { reject(new Error(`${holder}: event not seen within ${String(deadlineMs)} ms`)); });
        }, deadlineMs);
        const done = (f: () => void): void => {
          clearTimeout(timer);
          waiters.delete(check);
          f();
        };
        waiters.add(check);
        check();
      });
    },
  };
  return child;
}

/** SIGKILL (if still running) and wait for the exit. */
export async function killKeeper(k: KeeperChild): Promise<void> {
  if (k.proc.exitCode === null && k.proc.signalCode === null) k.kill();
  await k.exited;
}

export interface EpochReport {
  readonly epochs: number;
  readonly takeovers: number;
  readonly violations: readonly string[];
}

/** What every keeper logged, checked: each epoch led by one holder; each revision taken over by one holder. */
export function checkOneLeaderPerEpoch(ks: readonly KeeperChild[]): EpochReport {
  const byEpoch = new Map<number, Set<string>>();
  const byFrom = new Map<number, Set<string>>();
  for (const k of ks) {
    for (const e of k.events) {
      if (e.ev !== "leader" || e.epoch === undefined) continue;
      byEpoch.set(e.epoch, (byEpoch.get(e.epoch) ?? new Set()).add(k.holder));
      if (e.from !== undefined && e.from > 0) byFrom.set(e.from, (byFrom.get(e.from) ?? new Set()).add(k.holder));
    }
  }
  const violations: string[] = [];
  for (const [epoch, hs] of byEpoch) if (hs.size > 1) violations.push(`epoch ${String(epoch)} led by ${[...hs].join(", ")}`);
  for (const [from, hs] of byFrom) if (hs.size > 1) violations.push(`revision ${String(from)} taken over by ${[...hs].join(", ")}`);
  return { epochs: byEpoch.size, takeovers: byFrom.size, violations };
}

/** One line per keeper: its role changes (L<epoch>/F<epoch>) and how it ended, for a failure's message. */
export function describeFleet(ks: readonly KeeperChild[]): string {
  return ks
    .map((k) => {
      const roles = k.events.filter((e) => e.ev === "leader" || e.ev === "follower").map((e) => `${e.ev === "leader" ? "L" : "F"}${String(e.epoch)}${e.ev === "leader" ? `<${String(e.from)}` : `(${String(e.reason)})`}@${String(e.wallMs % 1_000_000)}`);
      return `${k.holder}${k.exitedOnItsOwn() ? " EXITED" : ""}: ${roles.join(" ")}`;
    })
    .join("\n");
}
