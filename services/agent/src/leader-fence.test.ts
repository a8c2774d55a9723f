import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { Code, StaleLeaderEpochError, WardenError, isStaleLeaderEpoch } from "@warden/common";
import { judgeLeaderEpoch, leaderEpochFileText, parseLeaderEpochFile } from "./leader-fence.js";
import { LeaderFence, leaderEpochFileName } from "./leader-fence-store.js";

const dirs: string[] = [];
async function stateDir(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), "warden-fence-"));
  dirs.push(d);
  return d;
}
afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (e) {
    return e;
  }
  return undefined;
}

describe("judgeLeaderEpoch (pure)", () => {
  it("accepts equal and newer epochs, raising only on newer", () => {
    expect(judgeLeaderEpoch(0n, 0n)).toEqual({ t: "accept", newestSeen: 0n, raises: false });
    expect(judgeLeaderEpoch(5n, 5n)).toEqual({ t: "accept", newestSeen: 5n, raises: false });
    expect(judgeLeaderEpoch(5n, 9n)).toEqual({ t: "accept", newestSeen: 9n, raises: true });
    expect(judgeLeaderEpoch(0n, 0xffff_ffff_ffff_ffffn)).toEqual({ t: "accept", newestSeen: 0xffff_ffff_ffff_ffffn, raises: true });
  });

  it("refuses an older epoch — epoch 0 too once a nonzero one was seen — naming leader_epoch and both values", () => {
    for (const [newest, epoch] of [[5n, 4n], [1n, 0n], [0xffff_ffff_ffff_ffffn, 0n]] as const) {
      const v = judgeLeaderEpoch(newest, epoch);
      expect(v.t).toBe("refuse");
      if (v.t !== "refuse") continue;
      expect(v.error.code).toBe(Code.FailedPrecondition);
      expect(v.error.rawMessage).toMatch(new RegExp(`^leader_epoch: ${String(epoch)} is older than the newest leader epoch this agent has seen \\(${String(newest)}\\)`));
      expect(v.error.details).toEqual({ field: "leader_epoch", reason: "stale-leader-epoch", leaderEpoch: String(epoch), newestSeen: String(newest) });
      expect(v.error).toBeInstanceOf(StaleLeaderEpochError);
    }
  });

  it("types a refusal that arrived as a plain WardenError (over the wire), and nothing else", () => {
    const wire = new WardenError(Code.FailedPrecondition, "leader_epoch: 3 is older…", { details: { field: "leader_epoch", reason: "stale-leader-epoch", leaderEpoch: "3", newestSeen: "8" } });
    const typed = StaleLeaderEpochError.fromWire(wire);
    expect(Object.getPrototypeOf(typed)).toBe(StaleLeaderEpochError.prototype);
    expect(typed).toMatchObject({ leaderEpoch: 3n, newestSeen: 8n, code: Code.FailedPrecondition });
    const other = new WardenError(Code.FailedPrecondition, "journal: closed");
    expect(StaleLeaderEpochError.fromWire(other)).toBe(other);
    expect(isStaleLeaderEpoch(other)).toBe(false);
    expect(other).not.toBeInstanceOf(StaleLeaderEpochError);
    expect(isStaleLeaderEpoch(wire)).toBe(true);
  });

  it("round-trips the fence file and refuses anything else rather than read it as 0", () => {
    expect(parseLeaderEpochFile("f", leaderEpochFileText(18446744073709551615n))).toBe(18446744073709551615n);
    for (const bad of ["", "{}", '{"version":1,"leaderEpoch":5}', '{"version":2,"leaderEpoch":"5"}', '{"version":1,"leaderEpoch":"-1"}', '{"version":1,"leaderEpoch":"18446744073709551616"}', '{"version":1,"leaderEpoch":"05"}']) {
      expect(thrown(() => parseLeaderEpochFile("f", bad))).toMatchObject({ code: Code.DataLoss });
    }
  });
});

describe("LeaderFence (the owner)", () => {
  it("refuses before load (UNAVAILABLE), then persists a raised epoch before admit resolves", async () => {
    const dir = await stateDir();
    const fence = new LeaderFence(dir);
    expect(thrown(() => { fence.check(0n); })).toMatchObject({ code: Code.Unavailable });
    await fence.load();
    fence.check(0n);
    await fence.admit(0n);
    // Epoch 0 on a fence of 0 writes nothing: the single-machine default has no extra I/O.
    await expect(readFile(join(dir, leaderEpochFileName), "utf8")).rejects.toMatchObject({ code: "ENOENT" });
    await fence.admit(7n);
    expect(await readFile(join(dir, leaderEpochFileName), "utf8")).toBe(leaderEpochFileText(7n));
    expect(fence.newestSeen()).toBe(7n);
    expect(thrown(() => { fence.check(6n); })).toBeInstanceOf(StaleLeaderEpochError);
    await expect(fence.admit(0n)).rejects.toBeInstanceOf(StaleLeaderEpochError);
    const again = new LeaderFence(dir);
    await again.load();
    expect(again.newestSeen()).toBe(7n);
    expect(thrown(() => { again.check(6n); })).toBeInstanceOf(StaleLeaderEpochError);
  });

  it("raise(): the followed leader's announced epoch fences without any command, persisted, never lowered", async () => {
    const dir = await stateDir();
    const fence = new LeaderFence(dir);
    await fence.load();
    await fence.raise(12n);
    expect(fence.newestSeen()).toBe(12n);
    expect(thrown(() => { fence.check(11n); })).toBeInstanceOf(StaleLeaderEpochError);
    fence.check(12n);
    await fence.raise(3n);
    expect(fence.newestSeen()).toBe(12n);
    const again = new LeaderFence(dir);
    await again.load();
    expect(again.newestSeen()).toBe(12n);
  });

  it("raises in memory at once: an older command arriving during the write is refused, and the write's own command sees it on its re-check", async () => {
    const dir = await stateDir();
    const fence = new LeaderFence(dir);
    await fence.load();
    const five = fence.admit(5n);
    expect(thrown(() => { fence.check(4n); })).toBeInstanceOf(StaleLeaderEpochError);
    const nine = fence.admit(9n);
    await five;
    // 5 is on disk (or more), but 9 arrived meanwhile: the caller's re-check refuses 5 before it acts.
    expect(thrown(() => { fence.check(5n); })).toBeInstanceOf(StaleLeaderEpochError);
    await nine;
    fence.check(9n);
    expect(await readFile(join(dir, leaderEpochFileName), "utf8")).toBe(leaderEpochFileText(9n));
  });

  it("fails a command whose epoch cannot be persisted, keeping the raised fence (the safe side)", async () => {
    const dir = await stateDir();
    const fence = new LeaderFence(dir);
    await fence.load();
    // A non-empty directory where the file goes: the rename fails (root or not).
    const blocker = join(dir, leaderEpochFileName);
    await mkdir(join(blocker, "x"), { recursive: true });
    await expect(fence.admit(3n)).rejects.toMatchObject({ code: Code.Unavailable });
    await rm(blocker, { recursive: true });
    expect(thrown(() => { fence.check(2n); })).toBeInstanceOf(StaleLeaderEpochError);
    await fence.admit(3n);
    expect(await readFile(join(dir, leaderEpochFileName), "utf8")).toBe(leaderEpochFileText(3n));
  });

  it("refuses to start on a corrupt fence file (DATA_LOSS)", async () => {
    const dir = await stateDir();
    await writeFile(join(dir, leaderEpochFileName), "garbage");
    await expect(new LeaderFence(dir).load()).rejects.toMatchObject({ code: Code.DataLoss });
  });
});
