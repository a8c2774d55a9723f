import { JetStreamApiCodes, JetStreamApiError } from "@nats-io/jetstream";
import type { KV, KvEntry } from "@nats-io/kv";
import { leaseConfig } from "@warden/lease";
import { afterEach, describe, expect, it } from "vitest";
import { LeaseKeeper, type LeaseChange } from "./lease-keeper.js";

/**
 * A lease bucket in memory, shaped like a clustered one seen from a member
 * whose KV watch cannot start (nats-server 2.9 placed its consumer on a server
 * that was lost): while `watchBroken` every watch fails (else it starts and
 * stays silent), while gets and writes, answered by the stream leader, work
 * unless the bucket is `down` (no quorum).
 */
class FakeLeaseKv {
  private seq = 0;
  private readonly entries = new Map<string, { readonly revision: number; readonly value: string }>();
  down = false;
  watchBroken = false;
  /** The next update of the lease key is stored, but its answer is lost and the bucket goes down. */
  loseNextUpdateAck = false;

  seed(key: string, value: string): number {
    this.entries.set(key, { revision: ++this.seq, value });
    return this.seq;
  }

  /** The stream lost the key's last writes in a leader change: it is back at an older revision (the stream's sequence goes on). */
  rewind(key: string, revision: number, value: string): void {
    this.entries.set(key, { revision, value });
  }

  revisionOf(key: string): number {
    return this.entries.get(key)?.revision ?? 0;
  }

  private checkUp(): void {
    if (this.down) throw new Error("TIMEOUT: no quorum");
  }

  private write(key: string, value: string, expected: number): number {
    const now = this.entries.get(key)?.revision ?? 0;
    if (now !== expected) throw new JetStreamApiError({ code: 400, err_code: JetStreamApiCodes.StreamWrongLastSequence, description: `wrong last sequence: ${String(now)}` });
    return this.seed(key, value);
  }

  readonly kv = {
    get: (key: string): Promise<KvEntry | null> => {
      this.checkUp();
      const e = this.entries.get(key);
      if (e === undefined) return Promise.resolve(null);
      return Promise.resolve({ key, revision: e.revision, operation: "PUT", json: () => JSON.parse(e.value) as unknown } as unknown as KvEntry);
    },
    put: (key: string, value: string, o: { previousSeq?: number } = {}): Promise<number> => {
      this.checkUp();
      return Promise.resolve(o.previousSeq === undefined ? this.seed(key, value) : this.write(key, value, o.previousSeq));
    },
    create: (key: string, value: string): Promise<number> => {
      this.checkUp();
      return Promise.resolve(this.write(key, value, 0));
    },
    update: (key: string, value: string, expected: number): Promise<number> => {
      this.checkUp();
      const revision = this.write(key, value, expected);
      if (this.loseNextUpdateAck) {
        this.loseNextUpdateAck = false;
        this.down = true;
        this.watchBroken = true;
        throw new Error("TIMEOUT: connection lost before the ack");
      }
      return Promise.resolve(revision);
    },
    watch: (): Promise<unknown> => {
      if (this.watchBroken) return Promise.reject(new Error("TIMEOUT: consumer info (consumer placed on a lost server)"));
      let stop = (): void => {};
      const stopped = new Promise<void>((r) => (stop = r));
      // Started and silent: it ends only when stopped.
      return Promise.resolve({
        stop,
        [Symbol.asyncIterator]: () => ({ next: async () => { await stopped; return { done: true, value: undefined }; } }),
      });
    },
  };
}

const keepers: LeaseKeeper[] = [];
afterEach(async () => {
  await Promise.all(keepers.splice(0).map((k) => k.stop()));
});

function keeperOver(fake: FakeLeaseKv, holder: string, changes: LeaseChange[]): LeaseKeeper {
  const k = LeaseKeeper.start({
    kv: fake.kv as unknown as KV,
    config: leaseConfig(holder, { leaseMs: 300, renewMs: 60, marginMs: 50, retryMs: 20 }),
    opTimeoutMs: 100,
    rewatchMs: 50,
    onChange: (c) => changes.push(c),
  });
  keepers.push(k);
  return k;
}

async function until(what: string, cond: () => boolean, timeoutMs = 20_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`${what}: not within ${String(timeoutMs)} ms`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe("LeaseKeeper when no watch can start", () => {
  it("reads the key anyway and takes over a lease its dead holder left", async () => {
    const fake = new FakeLeaseKv();
    fake.watchBroken = true;
    const deadRevision = fake.seed("leader", JSON.stringify({ holder: "dead-member", wallMs: 0 }));
    const changes: LeaseChange[] = [];
    const k = keeperOver(fake, "k", changes);
    await until("k leads", () => k.isLeader());
    expect(changes[0]).toMatchObject({ kind: "leader", previous: { holder: "dead-member", revision: deadRevision } });
  });

  it("an ex-leader whose last renewal landed unacknowledged leads again once quorum is back", async () => {
    const fake = new FakeLeaseKv();
    const changes: LeaseChange[] = [];
    const k = keeperOver(fake, "k", changes);
    await until("k leads", () => k.isLeader());
    const firstEpoch = k.epoch() ?? 0;
    // Quorum lost right after the stream stored a renewal: the key moved on, the keeper never heard.
    fake.loseNextUpdateAck = true;
    await until("k steps down", () => changes.some((c) => c.kind === "follower"));
    expect(changes.find((c) => c.kind === "follower")).toMatchObject({ reason: "lease-expiring" });
    fake.down = false;
    await until("k leads again", () => k.isLeader());
    expect(k.epoch()).toBeGreaterThan(firstEpoch);
    expect(k.entry()?.holder).toBe("k");
    expect(k.entry()?.revision).toBe(fake.revisionOf("leader"));
  });

  it("a key that went back (the stream lost writes in a leader change) is followed as it is, not taken for a stale read: the lease is taken again", async () => {
    const fake = new FakeLeaseKv();
    const dead = JSON.stringify({ holder: "dead-member", wallMs: 0 });
    const older = fake.seed("leader", dead);
    const newer = fake.seed("leader", dead);
    const changes: LeaseChange[] = [];
    const k = keeperOver(fake, "k", changes);
    await until("k has read the newer revision", () => k.entry()?.revision === newer);
    // Before k's count of that revision ends, the stream goes back to the older one.
    fake.rewind("leader", older, dead);
    // A takeover from `newer` is refused ("wrong last sequence: older"); the read after it shows the key went back.
    await until("k leads", () => k.isLeader());
    expect(changes[0]).toMatchObject({ kind: "leader", previous: { holder: "dead-member", revision: older } });
    expect(k.entry()?.revision).toBe(fake.revisionOf("leader"));
  });
});
