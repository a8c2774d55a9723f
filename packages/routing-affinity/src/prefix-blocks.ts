/**
 * Chained block hashes of a prompt: block i's hash covers every character
 * of blocks 0..i, so two prompts share hash i exactly when (barring a
 * collision) they share their first (i + 1) × blockChars characters. No
 * tokenizer: a backend's prefix cache works on tokens, but a prompt that
 * shares N characters with another shares about N characters' worth of
 * tokens, which is all routing needs to send it where its prefix is cached.
 * Only whole blocks are hashed (a cache reuses whole blocks), at most
 * `maxBlocks` of them (the work and memory per call stay bounded).
 */
export function prefixBlockHashes(text: string, blockChars: number, maxBlocks: number): number[] {
  if (!(blockChars >= 1)) throw new RangeError(`blockChars must be >= 1, got ${String(blockChars)}`);
  const n = Math.min(Math.floor(text.length / blockChars), Math.max(0, maxBlocks));
  const out = new Array<number>(n);
  // Two 32-bit FNV-1a-style lanes with different primes, combined into 53 bits (a safe integer, a cheap Map key).
  let a = 0x811c9dc5;
  let b = 0x9e3779b9;
  for (let i = 0; i < n; i++) {
    const end = (i + 1) * blockChars;
    for (let j = i * blockChars; j < end; j++) {
      const c = text.charCodeAt(j);
      a = Math.imul(a ^ c, 0x01000193);
      b = Math.imul(b ^ c, 0x5bd1e995);
      b ^= b >>> 15;
    }
    out[i] = (a >>> 0) * 0x200000 + ((b >>> 0) >>> 11);
  }
  return out;
}

/** One chat message as the prefix is computed from it. */
export interface ChatMessageText {
  readonly role: string;
  readonly content: string;
}

/**
 * A chat sent as messages (the backend applies its own template) rendered
 * for hashing: role and content in order, each with a separator no content
 * can fake at a block boundary that matters. Stable under appending turns —
 * the property prefix routing relies on: a conversation's next turn starts
 * with exactly the text of the previous one.
 */
export function renderChatForPrefix(messages: readonly ChatMessageText[]): string {
  let s = "";
  for (const m of messages) s += `<|${m.role}|>\n${m.content}\n`;
  return s;
}
