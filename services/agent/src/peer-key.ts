import { randomBytes } from "node:crypto";
import { constants } from "node:fs";
import { open, readFile } from "node:fs/promises";
import { join } from "node:path";
import { Code, WardenError, isHex64, peerKeyBytes } from "@warden/common";

/** The peer key's file in the agent's stateDir: 64 hex characters, mode 0600. */
export function peerKeyPath(stateDir: string): string {
  return join(stateDir, "peer.key");
}

/**
 * This agent's peer key: the secret the coordinator's peer tickets for it are
 * HMACs under (peer-ticket.ts). Made once from the system's random source and
 * kept in the stateDir, so tickets granted before a restart stay good; sent to
 * the coordinator only, over the agent's authenticated Register.
 */
export async function loadOrCreatePeerKey(stateDir: string): Promise<Uint8Array> {
  const path = peerKeyPath(stateDir);
  for (;;) {
    try {
      const text = (await readFile(path, "utf8")).trim();
      if (!isHex64(text)) throw new WardenError(Code.FailedPrecondition, `${path}: not a peer key (64 hex characters); remove it and a new one is made`);
      return Buffer.from(text, "hex");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    }
    try {
      const h = await open(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
      try {
        const key = randomBytes(peerKeyBytes);
        await h.writeFile(key.toString("hex"));
        await h.sync();
        return key;
      } finally {
        await h.close();
      }
    } catch (err) {
      // Another process made it between the read and the create: read theirs.
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
  }
}
