/** The injected source of randomness: uniform numbers in [0, 1). */
export interface Rng {
  next(): number;
}

/**
 * A deterministic generator (mulberry32) for tests and the seeded simulation:
 * the same seed gives the same sequence on every machine.
 */
export function seededRng(seed: number): Rng {
  let state = seed >>> 0;
  return {
    next() {
      state = (state + 0x6d2b79f5) >>> 0;
      let t = state;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    },
  };
}

/** Production randomness from the platform's CSPRNG. */
export const cryptoRng: Rng = {
  next() {
    const buf = new Uint32Array(1);
    globalThis.crypto.getRandomValues(buf);
    return (buf[0] ?? 0) / 4294967296;
  },
};
