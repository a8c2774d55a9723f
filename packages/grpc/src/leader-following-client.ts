import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { Code, WardenError, abortReason, isWardenError, backoffDelayMs, cryptoRng, invalidArgument, isNotLeader, leaderAddressOf, parseHostPortList, sleep, systemClock, type BackoffPolicy, type Clock, type Rng } from "@warden/common";
import { createClient, type CreateClientOptions } from "./client.js";
import { callNeverSent, serverWasSilent } from "./call-never-sent.js";
import type { CallOptions, Client } from "./types.js";

/** Attempt rounds one call may make (each: one pass over the list plus one hint hop). */
export const maxFollowRounds = 10;

export interface LeaderFollowingOptions<T extends DescService> {
  /**
   * Builds the client for one address; it must honour CallOptions.answerWithinMs
   * (createClient and createH2Client both do). @default createClient(service, address, clientOptions)
   */
  connect?: (address: string) => Client<T>;
  /** Passed to createClient when `connect` is not given: TLS as `tls`, not opaque `credentials` (the liveness check needs it). */
  clientOptions?: CreateClientOptions;
  /**
   * Whether a method may be re-sent after an UNAVAILABLE that is not a
   * standby's refusal (the connection dropped: it may have run). @default
   * reads only: names starting Get, List, Watch, Explain (see defaultIdempotent)
   */
  idempotent?: (method: DescMethod) => boolean;
  /** Attempt rounds per call, 1..10. @default 3 */
  maxRounds?: number;
  /** Wait between rounds. @default 100 ms × 2 up to 1 s, 20 % jitter */
  backoff?: BackoffPolicy;
  /**
   * Each attempt's liveness bound (CallOptions.answerWithinMs, honoured by the
   * per-address client, whichever of the two it is): a member that answers
   * nothing — SIGSTOPped, wedged — costs at most this long before the next
   * address is tried (reads, and writes it never got), or before the call
   * fails UNAVAILABLE (writes already sent to it: it may run them if it
   * resumes). It holds for the whole call: a server stream whose member
   * freezes after its first message ends UNAVAILABLE after it. A call's own
   * answerWithinMs wins. @default 2000
   */
  answerWithinMs?: number;
  clock?: Clock;
  rng?: Rng;
  /** A call succeeded on another address than before (the leader moved). */
  onLeaderChange?: (address: string, previous: string) => void;
  /** A refusal named a leader outside the caller's list: not followed. */
  onIgnoredHint?: (hint: string, from: string) => void;
}

/** createClient's surface, plus where calls go now. */
export type LeaderFollowingClient<T extends DescService> = Client<T> & {
  /** The address the next call tries first (the last that answered). */
  currentAddress(): string;
  readonly addresses: readonly string[];
};

/** Read through a function so TypeScript does not narrow `aborted` across awaits. */
function isAborted(signal: AbortSignal | undefined): signal is AbortSignal {
  return signal?.aborted === true;
}

const defaultBackoff: BackoffPolicy = { initialMs: 100, factor: 2, maxMs: 1_000, jitter: 0.2 };

/** The default per-attempt liveness bound: a frozen member costs about this long. */
export const defaultAnswerWithinMs = 2_000;

/** Reads: safe to send again after a dropped connection. */
export function defaultIdempotent(method: DescMethod): boolean {
  return /^(Get|List|Watch|Explain)/.test(method.name);
}

/**
 * What a failed attempt means, the one retry rule:
 * - "follow": a standby's refusal (`isNotLeader`: it never ran the call), or a
 *   call that never left this process (no connection: callNeverSent), or any
 *   UNAVAILABLE on an idempotent method — try the hint or the next address;
 * - "surface": everything else, in particular an UNAVAILABLE on a
 *   non-idempotent method whose connection dropped mid-call (it may have run
 *   on a dying leader: re-sending could run a Predict or LoadModel twice), and
 *   every answer that is not UNAVAILABLE (the leader's own verdict).
 */
export function followDecision(err: unknown, idempotent: boolean): "follow" | "surface" {
  if (!(err instanceof WardenError) || err.code !== Code.Unavailable) return "surface";
  if (isNotLeader(err) || callNeverSent(err) || idempotent) return "follow";
  return "surface";
}

/**
 * A client over several coordinator addresses (1..8, host:port each, no
 * duplicates) that follows the HA leader. A call goes to the current
 * address; when followDecision says "follow", it goes to the refusal's
 * leader hint if that hint is one of `addresses` (a hint outside the list is
 * ignored: a hostile peer must not redirect the caller), else to the next
 * address. One round is at most one pass over the list plus one hint hop;
 * rounds are separated by jittered backoff, at most `maxRounds`, and never
 * run past the caller's deadline or signal. A success makes its address
 * current. Server streams follow only while no message has arrived (a
 * member that freezes after it ends the stream UNAVAILABLE, and is tried
 * last by the next call);
 * client/bidi streams are not re-sent (their requests are consumed), they
 * only move `current` to an in-list hint for the next call.
 */
export function createLeaderFollowingClient<T extends DescService>(svc: T, addresses: string | readonly string[], options: LeaderFollowingOptions<T> = {}): LeaderFollowingClient<T> {
  const list = parseHostPortList(addresses, "addresses");
  const maxRounds = options.maxRounds ?? 3;
  if (!Number.isInteger(maxRounds) || maxRounds < 1 || maxRounds > maxFollowRounds) throw invalidArgument("maxRounds", `must be 1..${String(maxFollowRounds)}, got ${String(maxRounds)}`);
  const clock = options.clock ?? systemClock;
  const rng = options.rng ?? cryptoRng;
  const backoff = options.backoff ?? defaultBackoff;
  const isIdempotent = options.idempotent ?? defaultIdempotent;
  if (options.connect === undefined && options.clientOptions?.credentials !== undefined && options.clientOptions.tls === undefined) {
    throw invalidArgument("clientOptions.credentials", "the leader-following client checks each member's liveness over a connection of its own: give TLS as clientOptions.tls");
  }
  const connect = options.connect ?? ((a: string) => createClient(svc, a, options.clientOptions));
  const answerWithinMs = options.answerWithinMs ?? defaultAnswerWithinMs;
  if (!Number.isFinite(answerWithinMs) || answerWithinMs <= 0) throw invalidArgument("answerWithinMs", `must be > 0, got ${String(answerWithinMs)}`);
  /**
   * Addresses whose last attempt met silence (serverWasSilent: paused or
   * wedged, not a refused or dropped connection, which fails fast and may be a
   * standby becoming leader), until when (wall ms). A suspect is tried last, is not
   * hopped to on a refusal's hint (standbys keep naming a dead or frozen
   * leader until its lease runs out), and is skipped while another member
   * answers this round: a frozen member must not cost its bound on every
   * round. An answer from it, or 2 × answerWithinMs, clears it.
   */
  const suspects = new Map<string, number>();
  const isSuspect = (address: string): boolean => {
    const until = suspects.get(address);
    if (until === undefined) return false;
    if (clock.wallNow() < until) return true;
    suspects.delete(address);
    return false;
  };
  const clients = new Map<string, Client<T>>();
  let current = list[0] ?? "";
  let closed = false;

  const clientOf = (address: string): Record<string, (...args: unknown[]) => unknown> => {
    if (closed) throw new WardenError(Code.Unavailable, "leader-following client is closed");
    let c = clients.get(address);
    if (c === undefined) {
      c = connect(address);
      clients.set(address, c);
    }
    return c as unknown as Record<string, (...args: unknown[]) => unknown>;
  };
  // The last address that answered (starts as the first listed): onLeaderChange compares with it, not with
  // `current`, which moveOff may have advanced already.
  let lastAnswered = current;
  const answered = (address: string): void => {
    suspects.delete(address);
    current = address;
    if (address === lastAnswered) return;
    const previous = lastAnswered;
    lastAnswered = address;
    options.onLeaderChange?.(address, previous);
  };
  /**
   * An address that hung past the deadline or dropped a call it may have run
   * is not re-sent to, but the next call starts at the following address: a
   * frozen (SIGSTOPped) or dying leader must not hold every later call.
   */
  const moveOff = (address: string): void => {
    if (address === current) current = list[(list.indexOf(address) + 1) % list.length] ?? current;
  };
  /** The in-list hint of a refusal, or undefined (reporting one outside the list). */
  const hintOf = (err: unknown, from: string): string | undefined => {
    const hint = leaderAddressOf(err);
    if (hint === undefined) return undefined;
    if (!list.includes(hint)) {
      options.onIgnoredHint?.(hint, from);
      return undefined;
    }
    return hint;
  };
  const deadlineOf = (opts: CallOptions | undefined): number | undefined => {
    const ds: number[] = [];
    if (opts?.timeoutMs !== undefined) ds.push(clock.wallNow() + opts.timeoutMs);
    if (opts?.deadlineAtMs !== undefined) ds.push(opts.deadlineAtMs);
    return ds.length === 0 ? undefined : Math.min(...ds);
  };
  const attemptOptions = (opts: CallOptions | undefined, deadlineAtMs: number | undefined): CallOptions => {
    const o: CallOptions = { answerWithinMs, ...opts };
    delete o.timeoutMs;
    if (deadlineAtMs !== undefined) o.deadlineAtMs = deadlineAtMs;
    return o;
  };

  /**
   * Runs `attempt` per the rule above; `attempt` resolves with a value or
   * rejects with the address's error. The last error is surfaced when rounds
   * or the deadline run out.
   */
  const follow = async <R>(idempotent: boolean, opts: CallOptions | undefined, attempt: (address: string, o: CallOptions) => Promise<R>): Promise<R> => {
    const signal = opts?.signal;
    const deadlineAtMs = deadlineOf(opts);
    const o = attemptOptions(opts, deadlineAtMs);
    let last: unknown = new WardenError(Code.Unavailable, `no coordinator answered at ${list.join(",")}`);
    // A standby's refusal says more than a transport error (the cluster is up; a leader is coming): surfaced first.
    let lastRefusal: unknown;
    for (let round = 0; round < maxRounds; round++) {
      if (round > 0) {
        const delayMs = backoffDelayMs(backoff, round - 1, rng);
        if (deadlineAtMs !== undefined && clock.wallNow() + delayMs >= deadlineAtMs) break;
        await sleep(clock, delayMs, signal);
      }
      const start = list.indexOf(current);
      const rotated = [...list.slice(start), ...list.slice(0, start)];
      const queue = [...rotated.filter((a) => !isSuspect(a)), ...rotated.filter((a) => isSuspect(a))];
      const tried = new Set<string>();
      let hopped = false;
      let hopTo: string | undefined;
      let someoneAnswered = false;
      for (let address = queue.shift(); address !== undefined; address = queue.shift()) {
        // The one hint hop may revisit an address tried earlier this round (it was down then).
        if (address === hopTo) hopTo = undefined;
        else if (tried.has(address)) continue;
        if (someoneAnswered && isSuspect(address)) continue;
        tried.add(address);
        if (isAborted(signal)) throw abortReason(signal);
        try {
          const r = await attempt(address, o);
          answered(address);
          return r;
        } catch (err) {
          // The caller gave up (cancel or deadline): its reason, not the address's error.
          if (isAborted(signal)) throw abortReason(signal);
          const refusal = isNotLeader(err);
          if (refusal) {
            someoneAnswered = true;
            lastRefusal = err;
            suspects.delete(address);
          } else if (serverWasSilent(err)) suspects.set(address, clock.wallNow() + 2 * answerWithinMs);
          if (followDecision(err, idempotent) === "surface") {
            if (isWardenError(err, Code.DeadlineExceeded) || isWardenError(err, Code.Unavailable)) moveOff(address);
            throw err;
          }
          last = err;
          const hint = hintOf(err, address);
          if (hint !== undefined && hint !== address && !hopped && !isSuspect(hint)) {
            hopped = true;
            hopTo = hint;
            queue.unshift(hint);
          }
        }
        if (deadlineAtMs !== undefined && clock.wallNow() >= deadlineAtMs) throw lastRefusal ?? last;
      }
    }
    throw lastRefusal ?? last;
  };

  const unary = (m: DescMethod) => (request: unknown, opts?: CallOptions) =>
    follow(isIdempotent(m), opts, (address, o) => clientOf(address)[m.localName]?.(request, o) as Promise<unknown>);

  const serverStream = (m: DescMethod) =>
    async function* (request: unknown, opts?: CallOptions): AsyncGenerator {
      let it: AsyncIterator<unknown> | undefined;
      let first: IteratorResult<unknown> | undefined;
      let from = "";
      // Follow only until the first message: after that the stream belongs to one coordinator.
      // Not re-opened elsewhere after it either: no stream here can resume where it stopped, and
      // a silent re-open would hide the gap; the caller sees UNAVAILABLE and opens it again.
      await follow(isIdempotent(m), opts, async (address, o) => {
        from = address;
        const stream = clientOf(address)[m.localName]?.(request, o) as AsyncIterable<unknown>;
        const i = stream[Symbol.asyncIterator]();
        try {
          first = await i.next();
        } catch (err) {
          await i.return?.().catch(() => undefined);
          throw err;
        }
        it = i;
      });
      if (it === undefined || first === undefined) return;
      const iter = it;
      try {
        if (first.done === true) return;
        yield first.value;
        for (let r = await iter.next(); r.done !== true; r = await iter.next()) yield r.value;
      } catch (err) {
        // A member that froze mid-stream: the re-open (and the next call) starts elsewhere.
        if (serverWasSilent(err)) {
          suspects.set(from, clock.wallNow() + 2 * answerWithinMs);
          moveOff(from);
        }
        throw err;
      } finally {
        await iter.return?.().catch(() => undefined);
      }
    };

  const streaming = (m: DescMethod) => (requests: unknown, opts?: CallOptions) => {
    const address = current;
    // Bounded by the member's liveness as every call is: a frozen member ends the stream UNAVAILABLE
    // (silent) within answerWithinMs instead of holding it open, and the next call starts elsewhere.
    const out = clientOf(address)[m.localName]?.(requests, { answerWithinMs, ...opts });
    const note = (err: unknown): never => {
      const hint = hintOf(err, address);
      if (hint !== undefined) answered(hint);
      else if (serverWasSilent(err)) {
        suspects.set(address, clock.wallNow() + 2 * answerWithinMs);
        moveOff(address);
      }
      throw err;
    };
    if (m.methodKind === "client_streaming") return (out as Promise<unknown>).catch(note);
    return (async function* () {
      try {
        yield* out as AsyncIterable<unknown>;
      } catch (err) {
        note(err);
      }
    })();
  };

  const out: Record<string, unknown> = {
    close() {
      closed = true;
      for (const c of clients.values()) c.close();
      clients.clear();
    },
    currentAddress: () => current,
    addresses: list,
  };
  for (const m of svc.methods) {
    out[m.localName] = m.methodKind === "unary" ? unary(m) : m.methodKind === "server_streaming" ? serverStream(m) : streaming(m);
  }
  return out as LeaderFollowingClient<T>;
}
