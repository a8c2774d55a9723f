import type { Clock } from "./clock.js";
import type { Rng } from "./rng.js";

const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
const ulidPattern = /^[0-7][0-9A-HJKMNP-TV-Z]{25}$/;

/** True for a canonical 26-character ULID (Crockford base32, upper case). */
export function isUlid(value: string): boolean {
  return ulidPattern.test(value);
}

/** Milliseconds since the Unix epoch encoded in a ULID's first 10 characters. */
export function ulidTimeMs(value: string): number {
  let t = 0;
  for (let i = 0; i < 10; i++) t = t * 32 + alphabet.indexOf(value[i] ?? "0");
  return t;
}

/**
 * Makes ULIDs from an injected clock and rng, so incarnations minted in the
 * simulation are reproducible. Within one millisecond the random part is
 * incremented, so ids from one factory sort in creation order.
 */
export function createUlidFactory(clock: Pick<Clock, "wallNow">, rng: Rng): () => string {
  let lastMs = -1;
  let lastRandom: number[] = [];
  return () => {
    const ms = Math.max(0, Math.floor(clock.wallNow()));
    if (ms === lastMs) {
      let i = lastRandom.length - 1;
      while (i >= 0 && lastRandom[i] === 31) {
        lastRandom[i] = 0;
        i--;
      }
      if (i >= 0) lastRandom[i] = (lastRandom[i] ?? 0) + 1;
    } else {
      lastMs = ms;
      lastRandom = Array.from({ length: 16 }, () => Math.floor(rng.next() * 32));
      lastRandom[0] = (lastRandom[0] ?? 0) & 0x0f; // leave headroom for increments
    }
    let time = "";
    let t = ms;
    for (let i = 0; i < 10; i++) {
      time = (alphabet[t % 32] ?? "0") + time;
      t = Math.floor(t / 32);
    }
    return time + lastRandom.map((d) => alphabet[d] ?? "0").join("");
  };
}
