import { createHash } from "node:crypto";
import type { PredictOptions } from "@warden/proto";

/** What one prompt found in the cache. */
export interface PrefillResult {
  /** Blocks of the prompt, a partial last block included. */
  readonly blocks: number;
  /** Leading whole blocks found in the cache (no prefill cost). */
  readonly cached: number;
}

/**
 * The prompt as this simulated backend "tokenizes" it: the Prompt, else
 * the messages rendered in order (as a chat template would: a conversation's
 * next turn starts with the previous turn's text).
 */
export function simPromptText(req: Pick<PredictOptions, "Prompt" | "Messages">): string {
  if (req.Prompt !== "") return req.Prompt;
  let s = "";
  for (const m of req.Messages) s += `[${m.role}] ${m.content}\n`;
  return s;
}

/**
 * A backend's prefix cache (llama.cpp's prompt cache, vLLM's prefix
 * caching) modelled as a bounded LRU of prompt blocks: block i is keyed by a
 * hash of everything up to its end, so a hit on block i means the whole
 * prefix through it is cached. A prompt's leading cached blocks cost nothing
 * to prefill; the rest cost `prefill_block_ms` each. Deterministic: the same
 * calls in the same order give the same hits.
 */
export class SimPrefixCache {
  private readonly lru = new Map<string, true>();

  constructor(
    private readonly capacityBlocks: () => number,
    private readonly blockChars: () => number,
  ) {}

  get size(): number {
    return this.lru.size;
  }

  /** Looks the prompt up and caches its whole blocks (most recently used). */
  prefill(text: string): PrefillResult {
    return this.walk(text);
  }

  /** Caches the whole blocks of `text` (most recently used) without counting a lookup: the prompt and the answer generated after it. */
  remember(text: string): void {
    this.walk(text);
  }

  private walk(text: string): PrefillResult {
    const size = Math.max(1, this.blockChars());
    const whole = Math.floor(text.length / size);
    const blocks = Math.ceil(text.length / size);
    const capacity = this.capacityBlocks();
    let cached = 0;
    let missed = false;
    let chain = "";
    for (let i = 0; i < whole; i++) {
      chain = createHash("sha1").update(chain).update(text.slice(i * size, (i + 1) * size)).digest("base64");
      const hit = this.lru.delete(chain);
      if (hit && !missed) cached++;
      else missed = true;
      if (capacity > 0) this.lru.set(chain, true);
    }
    while (this.lru.size > capacity) this.lru.delete(this.lru.keys().next().value as string);
    return { blocks, cached };
  }
}

/**
 * What follows the prompt once `answer` is generated, as the next turn
 * renders it: after a chat's messages, an assistant message holding the
 * answer (simPromptText's form); after a plain prompt (which a template
 * already ended with the assistant's opening), the answer itself.
 */
export function simContinuation(req: Pick<PredictOptions, "Prompt" | "Messages">, answer: string): string {
  return req.Prompt !== "" ? answer : `[assistant] ${answer}\n`;
}
