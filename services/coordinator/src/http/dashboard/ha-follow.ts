/**
 * Which HA member the dashboard page should be on (pure, shared with the
 * browser client). The page only ever navigates to a URL it has seen in a
 * member list (GET /api/dashboard/ha of an origin it trusted): a leader hint
 * from anywhere else, or a header of a hostile peer, is never followed.
 * Imports only types, so the browser bundle stays small.
 */
import type { DashboardHa } from "./dashboard-view.js";

/** What the page does next: stay and serve, go to another member, or wait here and ask again. */
export type HaStep = { readonly t: "serve" } | { readonly t: "go"; readonly url: string } | { readonly t: "wait"; readonly why: string };

/** Member URLs (http(s)://host:port) the page has seen, with their holder; `add` keeps the newest holder per URL. */
export class SeenMembers {
  private readonly byUrl = new Map<string, string>();

  add(v: DashboardHa): void {
    for (const m of v.members) if (/^https?:\/\/[^\s/?#@]+:\d{1,5}$/.test(m.httpUrl)) this.byUrl.set(m.httpUrl, m.holder);
  }

  has(url: string): boolean {
    return this.byUrl.has(url);
  }

  /** A member to try when this origin stopped answering: any seen URL but this origin and the member left behind. */
  fallback(origin: string, leftHolder: string | undefined): string | undefined {
    for (const [url, holder] of this.byUrl) if (url !== origin && holder !== leftHolder) return url;
    return undefined;
  }
}

/**
 * The step for this origin's answer `v`. `left`: the holder the page fled
 * (it stopped answering) — its lease may not have expired yet, so a standby
 * still naming it is waited on, never followed back to it.
 */
export function haStep(v: DashboardHa, seen: SeenMembers, origin: string, left: string | undefined): HaStep {
  const role = v.self?.role;
  if (!v.enabled || role === "leader" || role === "paused") return { t: "serve" };
  const l = v.leader;
  if (l === undefined || l.holder === v.self?.holder) return { t: "wait", why: "no leader is known yet" };
  if (l.holder === left) return { t: "wait", why: `waiting for a leader other than ${l.holder}` };
  if (l.httpUrl === "" || l.httpUrl === origin || !seen.has(l.httpUrl)) return { t: "wait", why: `the leader ${l.holder} has no known HTTP address` };
  return { t: "go", url: l.httpUrl };
}
