import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { Code, WardenError } from "@warden/common";
import { writeFileAtomic } from "./atomic-write.js";
import { judgeLeaderEpoch, leaderEpochFileText, parseLeaderEpochFile } from "./leader-fence.js";

/** The fence's file in the state dir: no ".json" suffix, so the record store never takes it for a backend record. */
export const leaderEpochFileName = "leader-epoch";

/**
 * The one owner of the agent's leader-epoch fence (rule: leader-fence.ts).
 * `newest` is the newest epoch admitted (in memory, raised synchronously on
 * admission so a stale command arriving meanwhile is refused at once);
 * `durable` the newest on disk. A command is acted on only once the disk
 * holds its epoch, so an agent restart never lowers the fence. A failed write
 * fails the command (nothing acted on) and leaves `newest` raised: refusing
 * more is the safe side, and the next admission writes again.
 */
export class LeaderFence {
  private newest = 0n;
  private durable = 0n;
  private loaded = false;
  private chain: Promise<void> = Promise.resolve();
  private readonly file: string;

  constructor(stateDir: string) {
    this.file = join(stateDir, leaderEpochFileName);
  }

  /** Reads the persisted fence (absent = 0). Call once, before serving. */
  async load(): Promise<void> {
    let text: string | undefined;
    try {
      text = await readFile(this.file, "utf8");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw new WardenError(Code.Unavailable, `cannot read ${this.file}: ${(err as Error).message}`, { cause: err });
    }
    const epoch = text === undefined ? 0n : parseLeaderEpochFile(this.file, text);
    if (epoch > this.newest) this.newest = epoch;
    if (epoch > this.durable) this.durable = epoch;
    this.loaded = true;
  }

  /** The newest leader epoch seen (0 = none), reported in inventories and heartbeats. */
  newestSeen(): bigint {
    return this.newest;
  }

  /**
   * The synchronous part of a command's validation: throws FAILED_PRECONDITION
   * (naming leader_epoch) for an epoch older than the newest seen, and
   * UNAVAILABLE before load() (the fence is not known yet). Changes nothing.
   */
  check(epoch: bigint): void {
    if (!this.loaded) throw new WardenError(Code.Unavailable, "agent not started (leader-epoch fence not loaded)");
    const v = judgeLeaderEpoch(this.newest, epoch);
    if (v.t === "refuse") throw v.error;
  }

  /**
   * Admits a command whose whole request is valid: raises the fence to its
   * epoch and resolves once that epoch is on disk. The caller then calls
   * check(epoch) again in the same turn as it acts — a newer epoch that
   * arrived during the write refuses the command before it did anything (no
   * read-then-act across this await).
   */
  async admit(epoch: bigint): Promise<void> {
    this.check(epoch);
    const v = judgeLeaderEpoch(this.newest, epoch);
    if (v.t === "accept") this.newest = v.newestSeen;
    if (epoch > this.durable) await this.persist();
  }

  /**
   * Raises the fence to the epoch the followed leader announced (Register /
   * Heartbeat answers) without any command: from then on a paused
   * old leader's commands are refused here too. Never lowers it; resolves once
   * the raised epoch is on disk.
   */
  async raise(epoch: bigint): Promise<void> {
    if (!this.loaded || epoch <= this.newest) return;
    this.newest = epoch;
    await this.persist();
  }

  /** Writes the newest epoch (whatever it is when the write starts); writes run one at a time. */
  private persist(): Promise<void> {
    const next = this.chain.then(async () => {
      const target = this.newest;
      if (target <= this.durable) return;
      await writeFileAtomic(this.file, leaderEpochFileText(target)).catch((err: unknown) => {
        throw new WardenError(Code.Unavailable, `cannot persist leader_epoch ${String(target)} to ${this.file}: ${(err as Error).message}; the command was not acted on`, { cause: err });
      });
      if (target > this.durable) this.durable = target;
    });
    this.chain = next.catch(() => {});
    return next;
  }
}
