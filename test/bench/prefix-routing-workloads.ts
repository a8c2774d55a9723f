/**
 * The prefix-routing bench's three workloads, as call scripts: deterministic
 * (a seeded generator), so every policy replays exactly the same calls.
 */

export interface ChatMessage {
  readonly role: string;
  readonly content: string;
}

/** One call: a prompt, chat messages, or a chat turn whose messages are read when it is sent. */
export interface WorkloadCall {
  readonly prompt?: string;
  readonly messages?: readonly ChatMessage[];
  /** A chat turn: the conversation so far (with the real answers to its earlier turns) and this turn's user message. */
  readonly turn?: () => readonly ChatMessage[];
  /** Told the whole answer this call got: a chat turn adds it to its conversation. */
  readonly answered?: (text: string) => void;
}

/** Calls in order per client: each client sends its calls one after another; clients run concurrently. */
export type Workload = readonly Iterable<WorkloadCall>[];

/** A multi-turn chat's turns, in order. */
export type Conversations = readonly (readonly WorkloadCall[])[];

/** mulberry32: a small seeded generator (the bench must replay the same calls for each policy). */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const words = "bike brake chain gear wheel tire saddle pedal frame fork spoke rim hub valve pump lever cable shifter crank bolt".split(" ");

function text(r: () => number, chars: number): string {
  let s = "";
  while (s.length < chars) s += `${words[Math.floor(r() * words.length)] ?? "x"} `;
  return s.slice(0, chars);
}

/**
 * (a) `conversations` chats of `turns` turns, each turn resending the whole
 * history with the answers the model really gave (as a chat client does), so
 * a replica that generated an answer holds it cached. The history lives in
 * the calls: build a fresh workload for each run.
 */
export function multiTurnChats(conversations: number, turns: number, seed: number, o: { readonly systemChars?: number; readonly userChars?: number } = {}): Conversations {
  const r = rng(seed);
  return Array.from({ length: conversations }, (_, c) => {
    const history: ChatMessage[] = [{ role: "system", content: `Conversation ${String(c)}. ${text(r, o.systemChars ?? 300)}` }];
    return Array.from({ length: turns }, (): WorkloadCall => {
      const user: ChatMessage = { role: "user", content: text(r, o.userChars ?? 200) };
      return {
        turn: () => [...history, user],
        answered: (answer) => {
          history.push(user, { role: "assistant", content: answer });
        },
      };
    });
  });
}

/** (b) `apps` long system prompts, each call one of them plus a short varying user part; `clients` callers. */
export function sharedSystemPrompts(apps: number, systemChars: number, calls: number, clients: number, seed: number): Workload {
  const r = rng(seed);
  const systems = Array.from({ length: apps }, (_, i) => `App ${String(i)} instructions. ${text(r, systemChars)}`);
  return Array.from({ length: clients }, () => Array.from({ length: Math.ceil(calls / clients) }, () => ({ prompt: `${systems[Math.floor(r() * apps)] ?? ""}\nUser: ${text(r, 100)}` })));
}

/** (c) unrelated prompts of `chars` characters. */
export function randomPrompts(calls: number, chars: number, clients: number, seed: number): Workload {
  const r = rng(seed);
  return Array.from({ length: clients }, () => Array.from({ length: Math.ceil(calls / clients) }, () => ({ prompt: `${String(r())} ${text(r, chars)}` })));
}

/**
 * Conversations served by whichever of `clients` is free: a FIFO of the
 * conversations whose last turn was answered, each client taking the next
 * one's next turn — as users behind a pool of connections, not one user per
 * connection. Every conversation stays open (its history competing for cache
 * room) while only `clients` calls are in flight. Why not bind conversations
 * to clients: a closed-loop client sends its next call the moment its last
 * one ends, when the replica that answered is the least loaded, so
 * least-in-flight keeps each client — and with it each of its conversations —
 * on one replica, an affinity no real set of users has.
 */
export function conversationPool(conversations: Conversations, clients: number): Workload {
  const ready = conversations.map((turns) => ({ turns, next: 0 }));
  const client = function* (): Generator<WorkloadCall> {
    for (;;) {
      const c = ready.shift();
      if (c === undefined) return;
      const call = c.turns[c.next++];
      if (call === undefined) continue;
      // Resumed once the call was answered: the conversation's next turn is ready.
      yield call;
      if (c.next < c.turns.length) ready.push(c);
    }
  };
  return Array.from({ length: clients }, () => client());
}
