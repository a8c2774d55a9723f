import type { DashboardEvent, DashboardSnapshot } from "../dashboard-view.js";
import type { ConsolePage } from "./console-context.js";
import { byId, el } from "./dom.js";

/**
 * Client-side pages by URL hash (#/nodes, #/models, …): each page is a
 * `<section data-page>` of the one document, shown alone; the nav bar marks
 * the current one (aria-current). Every page keeps receiving snapshots and
 * events while hidden, so switching shows the present at once.
 */
export class Router {
  private current = "";

  constructor(private readonly pages: readonly ConsolePage[]) {}

  start(): void {
    const nav = byId("nav");
    nav.replaceChildren(...this.pages.map((p) => el("a", { href: `#/${p.id}`, "data-nav": p.id }, p.title)));
    window.addEventListener("hashchange", () => {
      this.show();
    });
    this.show();
  }

  /** The page the hash names (unknown or none: the first). */
  private chosen(): ConsolePage {
    const id = location.hash.replace(/^#\/?/, "");
    return this.pages.find((p) => p.id === id) ?? (this.pages[0] as ConsolePage);
  }

  private show(): void {
    const p = this.chosen();
    for (const s of document.querySelectorAll<HTMLElement>("section[data-page]")) s.hidden = s.dataset.page !== p.id;
    for (const a of document.querySelectorAll<HTMLElement>("#nav a")) {
      if (a.dataset.nav === p.id) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
    document.title = `Warden · ${p.title}`;
    if (p.id !== this.current) {
      this.current = p.id;
      p.onShow?.();
    }
  }

  snapshot(s: DashboardSnapshot): void {
    for (const p of this.pages) p.onSnapshot?.(s);
  }

  event(e: DashboardEvent): void {
    for (const p of this.pages) p.onEvent?.(e);
  }
}
