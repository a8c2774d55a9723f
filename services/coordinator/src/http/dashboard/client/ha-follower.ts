/**
 * The dashboard page's side of HA: it reads which member this origin is and
 * who leads, shows it, and moves the page to the leader (or to another member
 * it has seen when this one stops answering). The decisions are ha-follow.ts's;
 * this is their fetches, navigation and rendering.
 */
import type { DashboardHa } from "../dashboard-view.js";
import { SeenMembers, haStep } from "../ha-follow.js";
import { byId } from "./dom.js";

/** Between two asks of a member that does not serve (yet). */
const haPollMs = 1_000;
/** Failed asks in a row before the page tries another member it has seen. */
const haUnreachableTries = 3;
/** One ask's deadline: a request that stalls (a member going away, a connection that never answers) counts as a failed ask, so the page never waits on it for good. */
const haAskTimeoutMs = 5_000;
/** The query parameter naming the member the page left (the standby's HTTP listener reads it too). */
const leftParam = "left";

export type ConnState = "connecting" | "live" | "error";

export class HaFollower {
  /** Every member URL a member list of this page named: the only places it navigates to. */
  private readonly seen = new SeenMembers();
  /** The member this origin was last seen to be (its holder): named in `?left=` when the page flees it. */
  private selfHolder: string | undefined;
  private readAtMs = 0;

  constructor(
    private readonly headers: () => Record<string, string>,
    /** Shows the connection state in the page header. */
    private readonly setConn: (s: ConnState, text: string) => void,
  ) {}

  /** With each snapshot, at most every few seconds: the members and who leads, as this origin sees them now. */
  async refresh(): Promise<void> {
    if (Date.now() - this.readAtMs < 5_000) return;
    this.readAtMs = Date.now();
    const v = await this.read();
    if (typeof v === "string") return;
    this.seen.add(v);
    this.selfHolder = v.self?.holder;
    this.render(v);
  }

  /**
   * Returns once this origin serves the API (the leader, a paused leader, a
   * single coordinator). Meanwhile: a standby naming a leader the page has
   * seen sends the page there; an origin that stops answering is left for
   * another member the page has seen. Navigation never returns. True when
   * this origin served at the first ask (what the page asked alongside it holds).
   */
  async settle(): Promise<boolean> {
    const left = new URLSearchParams(location.search).get(leftParam) ?? undefined;
    let unreachable = 0;
    for (let ask = 0; ; ask++) {
      const v = await this.read();
      if (v === "open") return ask === 0;
      if (v === "unreachable") {
        unreachable++;
        const other = unreachable >= haUnreachableTries ? this.seen.fallback(location.origin, left) : undefined;
        if (other !== undefined) {
          this.go(other, this.selfHolder ?? left);
          return new Promise<never>(() => undefined);
        }
        this.setConn("error", "this coordinator does not answer; retrying");
      } else {
        unreachable = 0;
        this.seen.add(v);
        this.selfHolder = v.self?.holder;
        this.render(v);
        const step = haStep(v, this.seen, location.origin, left);
        if (step.t === "serve") {
          if (left !== undefined) history.replaceState(null, "", location.pathname);
          return ask === 0;
        }
        if (step.t === "go") {
          this.go(step.url, undefined);
          return new Promise<never>(() => undefined);
        }
        this.setConn("connecting", `standby: ${step.why}; waiting`);
      }
      await new Promise((r) => setTimeout(r, haPollMs));
    }
  }

  /** This origin's HA view; "unreachable" when it does not answer; "open" when it does not say (auth refused, no HA routes): go on as before. */
  private async read(): Promise<DashboardHa | "unreachable" | "open"> {
    let res: Response;
    try {
      res = await fetch("/api/dashboard/ha", { headers: this.headers(), cache: "no-store", signal: AbortSignal.timeout(haAskTimeoutMs) });
    } catch {
      return "unreachable";
    }
    if (!res.ok) return res.status >= 500 ? "unreachable" : "open";
    try {
      // The body under the same deadline: the signal covers reading it too.
      return (await res.json()) as DashboardHa;
    } catch {
      return "unreachable";
    }
  }

  private render(v: DashboardHa): void {
    const e = byId("ha");
    if (!v.enabled || v.self === undefined) {
      e.hidden = true;
      return;
    }
    e.hidden = false;
    e.dataset.holder = v.self.holder;
    e.dataset.role = v.self.role;
    e.dataset.leader = v.leader?.holder ?? "";
    const leader = v.leader === undefined ? " · no leader known" : v.leader.holder === v.self.holder ? "" : ` · leader ${v.leader.holder}`;
    e.textContent = `on ${v.self.holder} (${v.self.role})${leader}`;
  }

  private go(url: string, left: string | undefined): void {
    this.setConn("connecting", `following the leader to ${url}…`);
    location.assign(`${url}/${left === undefined ? "" : `?${leftParam}=${encodeURIComponent(left)}`}`);
  }
}
