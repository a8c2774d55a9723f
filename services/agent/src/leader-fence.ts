import { Code, StaleLeaderEpochError, WardenError, isPlanted } from "@warden/common";

/**
 * The leader-epoch fence's rule, pure so the agent and the
 * simulation's SimAgent judge commands alike. `newestSeen` is the newest
 * leader epoch any command brought; a command from an older epoch is refused,
 * an equal one accepted, a newer one accepted and raises the fence. Epoch 0
 * is "no HA": it passes while the fence is 0 and is refused once any nonzero
 * epoch was seen (a coordinator without HA beside an HA leader is as stale as
 * an old leader). Epochs are uint64 on the wire: any value 0..2^64-1.
 */
export type FenceVerdict =
  | { readonly t: "accept"; readonly newestSeen: bigint; readonly raises: boolean }
  | { readonly t: "refuse"; readonly error: StaleLeaderEpochError };

/** Judges one command's epoch against the newest seen; never mutates. */
export function judgeLeaderEpoch(newestSeen: bigint, epoch: bigint): FenceVerdict {
  if (epoch < newestSeen) {
    // Planted bug (simulation only): the stale command goes through and the fence stays where it was.
    if (isPlanted("agent-ignores-leader-epoch")) return { t: "accept", newestSeen, raises: false };
    return { t: "refuse", error: new StaleLeaderEpochError(epoch, newestSeen) };
  }
  return { t: "accept", newestSeen: epoch > newestSeen ? epoch : newestSeen, raises: epoch > newestSeen };
}

/** The commands the fence judges: every one that changes a backend or the agent's state. */
export type FencedCommand = "start" | "stop" | "stopOrphan" | "free";

/**
 * Whether the fence judges a command of this kind: every one does. Planted
 * bug "free-past-fence" (simulation only): FreeBackend goes through unjudged
 * — a Free sent past the agent's fence, as the coordinator's direct Free was.
 */
export function fenceJudges(kind: FencedCommand): boolean {
  return !(kind === "free" && isPlanted("free-past-fence"));
}

/** The fence file's text (one JSON object; the epoch as a decimal string, being uint64). */
export function leaderEpochFileText(epoch: bigint): string {
  return `${JSON.stringify({ version: 1, leaderEpoch: String(epoch) })}\n`;
}

/** Parses the fence file; throws DATA_LOSS on anything else (a fence read as 0 would let a stale leader in). */
export function parseLeaderEpochFile(file: string, text: string): bigint {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    v = undefined;
  }
  const epoch = typeof v === "object" && v !== null && (v as { version?: unknown }).version === 1 ? (v as { leaderEpoch?: unknown }).leaderEpoch : undefined;
  if (typeof epoch !== "string" || !/^(0|[1-9][0-9]{0,19})$/.test(epoch) || BigInt(epoch) > 0xffff_ffff_ffff_ffffn) {
    throw new WardenError(Code.DataLoss, `${file}: not a leader-epoch record ({"version":1,"leaderEpoch":"<uint64>"}); refusing to start with the fence lowered — remove the file only if no HA coordinator has ever commanded this agent`);
  }
  return BigInt(epoch);
}
