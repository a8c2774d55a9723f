/**
 * An HTTP caller of the OpenAI API given every HA member's base URL, following
 * the leader the way the operator's guide documents a standby's answers
 * (services/coordinator/docs/high-availability.md, "HTTP"): a standby serves
 * nothing and answers 503 with `Retry-After` and, when it knows one, the
 * leader's URL in `Warden-Leader`. So a call goes to the member that last
 * served; a 503 naming a leader of the list sends it there at once; a 503
 * naming none (or a member that just stayed silent) waits `Retry-After` and
 * tries the next member; a refused connection tries the next member at once.
 * A member that sends no response headers within `attemptTimeoutMs` (a
 * SIGSTOPped process: its kernel still accepts the connection) ends the call
 * — a POST already sent may still run when that member resumes, so it is not
 * sent again — and is skipped for the next calls for `silentSkipMs`.
 * Everything within the call's deadline.
 */

export interface HttpCallOutcome {
  /** "ok", or the kind of the last failure: "503 unavailable", "no answer", "connection refused"… */
  readonly kind: string;
  readonly message: string;
  /** Requests sent for this call (1 when the first member served). */
  readonly attempts: number;
  /** When the call ended (Date.now(); for the run's report, never for a verdict). */
  readonly endedAtMs: number;
}

export interface HttpLeaderCaller {
  /** POSTs `body` as JSON to `path` (e.g. /v1/chat/completions) within `deadlineMs`. Never throws. */
  post(path: string, body: unknown, deadlineMs: number): Promise<HttpCallOutcome>;
}

export interface HttpLeaderCallerOptions {
  /** 1..8 base URLs (http://host:port), the members' `httpListen`. */
  readonly urls: readonly string[];
  /** Bound on one attempt's wait for response headers. @default 5000 */
  readonly attemptTimeoutMs?: number;
  /** How long a member that answered nothing is tried last. @default 4000 */
  readonly silentSkipMs?: number;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, ms)));

/** `Retry-After` in ms (delta-seconds only), 1 s when absent or unreadable, at most 5 s. */
function retryAfterMs(h: string | null): number {
  const s = Number(h ?? "1");
  return Number.isFinite(s) && s >= 0 ? Math.min(s, 5) * 1000 : 1000;
}

function causeCode(err: unknown): string {
  const cause = (err as { cause?: { code?: unknown } } | undefined)?.cause;
  return typeof cause?.code === "string" ? cause.code : "";
}

export function createHttpLeaderCaller(o: HttpLeaderCallerOptions): HttpLeaderCaller {
  if (o.urls.length < 1 || o.urls.length > 8) throw new Error(`urls: 1..8 base URLs, got ${String(o.urls.length)}`);
  const urls = o.urls.map((u) => u.replace(/\/+$/, ""));
  const attemptTimeoutMs = o.attemptTimeoutMs ?? 5_000;
  const silentSkipMs = o.silentSkipMs ?? 4_000;
  let preferred = 0;
  const silentUntil = new Map<number, number>();
  const isSilent = (i: number): boolean => (silentUntil.get(i) ?? 0) > Date.now();
  /** The next member after `i`, one that answered lately first. */
  const nextAfter = (i: number): number => {
    for (let k = 1; k <= urls.length; k++) {
      const j = (i + k) % urls.length;
      if (!isSilent(j)) return j;
    }
    return (i + 1) % urls.length;
  };
  return {
    async post(path, body, deadlineMs) {
      const end = Date.now() + deadlineMs;
      let at = isSilent(preferred) ? nextAfter(preferred) : preferred;
      let attempts = 0;
      let last = { kind: "deadline", message: "no attempt was made within the deadline" };
      const done = (kind: string, message: string): HttpCallOutcome => ({ kind, message, attempts, endedAtMs: Date.now() });
      while (Date.now() < end) {
        attempts++;
        const timeoutMs = Math.min(attemptTimeoutMs, end - Date.now());
        let res: Response;
        try {
          res = await fetch(`${urls[at]!}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), signal: AbortSignal.timeout(timeoutMs) });
        } catch (err) {
          const code = causeCode(err);
          if (code === "ECONNREFUSED" || code === "ECONNRESET") {
            // Not held against it: a standby becoming leader refuses for a moment.
            last = { kind: code === "ECONNREFUSED" ? "connection refused" : "connection reset", message: `${urls[at]!}: ${code}` };
            at = nextAfter(at);
            // Every member refusing (all restarting): do not spin.
            if (attempts % urls.length === 0) await sleep(Math.min(250, end - Date.now()));
            continue;
          }
          if (err instanceof Error && (err.name === "TimeoutError" || err.name === "AbortError")) {
            silentUntil.set(at, Date.now() + silentSkipMs);
            preferred = nextAfter(at);
            return done("no answer", `${urls[at]!} sent no response headers within ${String(timeoutMs)} ms; a POST already sent is not re-sent`);
          }
          // The member went away mid-call (killed): the POST may have run, so it is not re-sent either.
          return done(code === "UND_ERR_SOCKET" ? "connection lost" : "network error", `${urls[at]!}: ${err instanceof Error ? err.message : String(err)} ${code}`);
        }
        const text = await res.text().catch(() => undefined);
        if (text === undefined) {
          silentUntil.set(at, Date.now() + silentSkipMs);
          preferred = nextAfter(at);
          return done("no answer", `${urls[at]!} sent its headers (${String(res.status)}) but not its body within ${String(timeoutMs)} ms`);
        }
        if (res.ok) {
          preferred = at;
          return done("ok", "");
        }
        let code = "";
        let message = text.slice(0, 300);
        try {
          const e = (JSON.parse(text) as { error?: { code?: unknown; message?: unknown } }).error;
          code = typeof e?.code === "string" ? e.code : "";
          message = typeof e?.message === "string" ? e.message : message;
        } catch {
          // not JSON: the status alone says it
        }
        last = { kind: `${String(res.status)}${code === "" ? "" : ` ${code}`}`, message };
        // Only UNAVAILABLE is "try again": any other 503 (FAILED_PRECONDITION, "no node can take it") is a verdict.
        if (res.status !== 503 || (code !== "" && code !== "unavailable")) return done(last.kind, message);
        const hinted = urls.indexOf((res.headers.get("warden-leader") ?? "").replace(/\/+$/, ""));
        if (hinted >= 0 && hinted !== at && !isSilent(hinted)) {
          // A standby naming a leader of our own list (a hint outside it is not followed).
          at = hinted;
          continue;
        }
        // No usable hint: a standby that knows no leader yet, or the leader itself not ready to serve.
        const fromStandby = message.startsWith("not the leader");
        await sleep(Math.min(retryAfterMs(res.headers.get("retry-after")), end - Date.now()));
        if (fromStandby) at = nextAfter(at);
      }
      return done(last.kind, `deadline of ${String(deadlineMs)} ms passed; last: ${last.message}`);
    },
  };
}

/**
 * The longest stretch without a successful call, in ms: from the start (or the
 * end of a successful call) to the end of the next successful one, taken only
 * where at least one call failed in between; and from the last success to
 * `endMs` when calls failed after it. For the run's report, not a verdict.
 */
export function longestOutageMs(outcomes: readonly { readonly ok: boolean; readonly endedAtMs: number }[], startMs: number, endMs: number): number {
  let longest = 0;
  let lastOk = startMs;
  let failedSince = false;
  for (const x of [...outcomes].sort((a, b) => a.endedAtMs - b.endedAtMs)) {
    if (!x.ok) {
      failedSince = true;
      continue;
    }
    if (failedSince) longest = Math.max(longest, x.endedAtMs - lastOk);
    lastOk = x.endedAtMs;
    failedSince = false;
  }
  if (failedSince) longest = Math.max(longest, endMs - lastOk);
  return longest;
}
