import type { Clock } from "@warden/common";
import type { Event } from "@warden/proto";
import type { Loader, RouteHint } from "@warden/loader";
import { PrefixIndex, chooseByPrefix, prefixBlockHashes, renderChatForPrefix, type PrefixIndexBounds } from "@warden/routing-affinity";
import type { BackendClientHandle } from "./backend-connector.js";

/** Block size and per-call bounds of prefix hashing, and the index's bounds (services/coordinator/docs/routing.md). */
export const prefixRoutingBounds = Object.freeze({
  /** Characters per block: about 16 tokens of English, a backend cache's granularity. */
  blockChars: 64,
  /** Blocks hashed per call: the first 64 Ki characters of a prompt decide where it goes. */
  maxBlocksPerCall: 1_024,
  index: Object.freeze<PrefixIndexBounds>({ maxEntries: 262_144, maxEntriesPerReplica: 32_768, ttlMs: 10 * 60_000 }),
});

/** Characters of a prompt prefix routing reads at most (the rest cannot change a call's block hashes). */
export const prefixPromptChars = prefixRoutingBounds.blockChars * prefixRoutingBounds.maxBlocksPerCall;

/** A Predict's prompt as prefix routing reads it: the Prompt, else the messages in order. */
export interface PromptParts {
  readonly Prompt?: string;
  readonly Messages?: readonly { readonly role?: string; readonly content?: string }[];
}

/** The text a prompt's block hashes are taken from (the rendered prompt, or the messages rendered in order). */
export function promptText(p: PromptParts | undefined): string {
  if (p === undefined) return "";
  if (p.Prompt !== undefined && p.Prompt !== "") return p.Prompt;
  return renderChatForPrefix((p.Messages ?? []).map((m) => ({ role: m.role ?? "", content: m.content ?? "" })));
}

/**
 * Prefix-affinity routing for models configured `routing: prefix`: each
 * call's prompt becomes chained block hashes; the index remembers which
 * replica was sent which blocks (its likely prefix cache); the pick is
 * chooseByPrefix's (@warden/routing-affinity). The index lives in this
 * coordinator's memory only: after a restart or a leader change it starts
 * empty, and the first calls cost a cache miss each — latency, never
 * correctness. A replica's entries are dropped when it stops.
 */
export class PrefixRouting {
  private readonly index: PrefixIndex;

  constructor(
    private readonly loader: Pick<Loader<BackendClientHandle>, "modelSpec">,
    private readonly clock: Pick<Clock, "now">,
    bounds: PrefixIndexBounds = prefixRoutingBounds.index,
  ) {
    this.index = new PrefixIndex(bounds);
  }

  /**
   * The route hint for one call, or undefined when the model is not routed
   * by prefix (nothing is read, hashed or remembered then). `prompt` is
   * read only for such models.
   */
  hint(model: string, prompt: () => PromptParts | undefined): (RouteHint & { routed(incarnation: string): void }) | undefined {
    const routing = this.loader.modelSpec(model)?.routing;
    if (routing?.mode !== "prefix") return undefined;
    const hashes = prefixBlockHashes(promptText(prompt()), prefixRoutingBounds.blockChars, prefixRoutingBounds.maxBlocksPerCall);
    if (hashes.length === 0) return undefined;
    return {
      prefer: (candidates, leastLoaded) => {
        const nowMs = this.clock.now();
        return chooseByPrefix(
          candidates.map((c) => ({ id: c.incarnation, inFlight: c.inFlight, matchedBlocks: this.index.matchLength(c.incarnation, hashes, nowMs) })),
          leastLoaded,
          routing.balanceMarginCalls,
        ).id;
      },
      routed: (incarnation) => {
        this.index.record(incarnation, hashes, this.clock.now());
      },
    };
  }

  /** Forgets each replica as its stop starts or its process exits (the audit events); returns this. */
  follow(events: { observe(fn: (e: Pick<Event, "payload" | "incarnation">) => void): void }): this {
    events.observe((e) => {
      if (e.payload.case === "evictionStarted" || e.payload.case === "backendExited") this.forget(e.incarnation);
    });
    return this;
  }

  /** A replica stopped (or is stopping): its entries go. */
  forget(incarnation: string): void {
    this.index.drop(incarnation);
  }

  /** Entries held, and replicas they belong to (tests, metrics). */
  get size(): { readonly entries: number; readonly replicas: number } {
    return { entries: this.index.size, replicas: this.index.replicas };
  }
}
