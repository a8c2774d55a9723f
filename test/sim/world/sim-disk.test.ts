import { describe, expect, it } from "vitest";
import type { JournalRecord } from "@warden/outbox";
import { EventQueue } from "../kernel/event-queue.js";
import { SimRandom } from "../kernel/sim-random.js";
import { VirtualClock } from "../kernel/virtual-clock.js";
import { ScopedClock } from "../coordinator/scoped-clock.js";
import { SimDisk } from "./sim-disk.js";

const rec = (incarnation: string): JournalRecord => ({ kind: "stop-intent-cleared", incarnation });

async function runAll(q: EventQueue, clock: VirtualClock): Promise<void> {
  for (let e = q.pop(); e !== undefined; e = q.pop()) {
    clock.advanceTo(e.atMs);
    e.fn();
    await new Promise<void>((r) => setImmediate(r));
  }
}

describe("SimDisk (regression: seed 1, long profile)", () => {
  it("a crashed generation writes nothing, and a crash never drops an fsync'd record", async () => {
    const q = new EventQueue();
    const clock = new VirtualClock(q);
    for (let seed = 1; seed <= 20; seed++) {
      const disk = new SimDisk(new SimRandom(seed), () => 2);
      const dead = new ScopedClock(clock);
      const deadJournal = disk.journal(dead);
      dead.kill();
      // The dead generation's late promise chain tries to write (it must not reach the disk).
      void deadJournal.append(rec("zombie"));
      const live = disk.journal(new ScopedClock(clock));
      const acked: string[] = [];
      for (const inc of ["a", "b", "c"]) void live.append(rec(inc)).then(() => acked.push(inc));
      await runAll(q, clock);
      expect(acked).toEqual(["a", "b", "c"]);
      disk.crash();
      const kept = (await live.replay()).map((r) => (r.kind === "stop-intent-cleared" ? r.incarnation : r.kind));
      expect(kept).toEqual(["a", "b", "c"]);
    }
  });
});
