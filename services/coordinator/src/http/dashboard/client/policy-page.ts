import type { DashboardPolicy } from "../dashboard-view.js";
import { may, responseError, type ConsoleContext, type ConsolePage } from "./console-context.js";
import { byId, el } from "./dom.js";
import { describePoint, sweepSection } from "./policy-sweep-view.js";

type Field = { readonly key: Exclude<keyof DashboardPolicy, "models">; readonly label: string; readonly kind: "flag" | "count" | "ms" | "fraction"; readonly help: string };

const fields: readonly Field[] = [
  { key: "limitPerNode", label: "Instances per node", kind: "count", help: "most loaded instances on one node; 0 = unlimited" },
  { key: "idleCheck", label: "Evict idle instances", kind: "flag", help: "unload an instance unused for the idle timeout" },
  { key: "idleTimeoutMs", label: "Idle timeout (ms)", kind: "ms", help: "how long unused before it is idle" },
  { key: "busyCheck", label: "Watch busy instances", kind: "flag", help: "act on an instance busy past the busy timeout" },
  { key: "busyTimeoutMs", label: "Busy timeout (ms)", kind: "ms", help: "how long one call may hold an instance busy" },
  { key: "memoryReclaimer", label: "Memory reclaimer", kind: "flag", help: "evict when a node's memory passes the threshold" },
  { key: "memoryThreshold", label: "Memory threshold", kind: "fraction", help: "fraction of a node's memory, in (0, 1]" },
  { key: "forceEvictionWhenBusy", label: "Evict busy instances too", kind: "flag", help: "eviction does not wait for calls in flight" },
  { key: "sizeAware", label: "Size-aware eviction", kind: "flag", help: "prefer evicting what frees enough memory" },
];

/**
 * Policy: the live watchdog policy (GetPolicy) for any reader; for a role
 * that may call UpdatePolicy, a form whose Save sends only the fields
 * changed. UpdatePolicy validates the whole change first: a refusal names the
 * field and changes nothing.
 */
export function policyPage(ctx: ConsoleContext): ConsolePage {
  let shown: DashboardPolicy | undefined;
  let saving = 0;
  let sweep: HTMLElement | undefined;

  const status = (text: string, error: boolean): void => {
    const r = byId("policy-result");
    r.textContent = text;
    r.className = error ? "action-result error" : "action-result";
  };

  const input = (f: Field, p: DashboardPolicy, editable: boolean): HTMLElement => {
    const v = p[f.key];
    const id = `policy-${f.key}`;
    if (!editable) return el("output", { id, "data-field": f.key }, typeof v === "boolean" ? (v ? "on" : "off") : String(v));
    if (f.kind === "flag") {
      const c = el("input", { id, type: "checkbox", "data-field": f.key });
      c.checked = v === true;
      return c;
    }
    return el("input", { id, type: "number", "data-field": f.key, value: String(v), min: "0", ...(f.kind === "fraction" ? { step: "0.01", max: "1" } : { step: "1" }) });
  };

  const render = (p: DashboardPolicy): void => {
    shown = p;
    const editable = may(ctx, "policy");
    const rows = fields.map((f) => el("div", { class: "policy-row" }, el("label", { for: `policy-${f.key}` }, f.label), input(f, p, editable), el("span", { class: "help" }, f.help)));
    const models = p.models.filter((m) => m.pinned || m.groups.length > 0);
    const table = models.length === 0 ? el("p", { class: "muted" }, "no model is pinned or in a concurrency group") : el("ul", { class: "policy-models" }, ...models.map((m) => el("li", {}, `${m.model}: ${m.pinned ? "pinned" : "not pinned"}${m.groups.length > 0 ? `, groups ${m.groups.join(", ")}` : ""}`)));
    const form = el("form", { id: "policy-form", class: "policy-form", "aria-label": "watchdog policy" }, ...rows, el("p", { class: "muted" }, `tick every ${String(p.tickIntervalMs)} ms (config file only)`));
    if (editable) {
      form.append(el("button", { type: "submit", class: "act" }, "Save"));
      form.addEventListener("submit", (e) => {
        e.preventDefault();
        void save();
      });
    }
    byId("policy").replaceChildren(form, el("h3", {}, "Pins and groups"), table);
    byId("policy").dataset.editable = String(editable);
    // The sweep sits beside the form, made once: a re-render of the policy keeps its result on screen.
    if (sweep === undefined) {
      sweep = sweepSection(ctx, editable, async (p) => {
        await load();
        status(`applied: ${describePoint(p)}`, false);
      });
      byId("page-policy").append(sweep);
    }
  };

  const save = async (): Promise<void> => {
    if (shown === undefined) return;
    const patch: Record<string, unknown> = {};
    for (const f of fields) {
      const e = byId(`policy-${f.key}`) as HTMLInputElement;
      const v = f.kind === "flag" ? e.checked : Number(e.value);
      if (v !== shown[f.key]) patch[f.key] = v;
    }
    if (Object.keys(patch).length === 0) {
      status("nothing changed", false);
      return;
    }
    const seq = ++saving;
    status(`saving ${Object.keys(patch).join(", ")}…`, false);
    const res = await fetch("/api/dashboard/policy", { method: "POST", headers: ctx.headers(true), body: JSON.stringify(patch) }).catch(() => undefined);
    if (seq !== saving) return;
    if (res === undefined || !res.ok) {
      status(`not saved — ${res === undefined ? "disconnected" : await responseError(res)}`, true);
      return;
    }
    render((await res.json()) as DashboardPolicy);
    status(`saved: ${Object.keys(patch).join(", ")}`, false);
  };

  const load = async (): Promise<void> => {
    const res = await fetch("/api/dashboard/policy", { headers: ctx.headers(), cache: "no-store" }).catch(() => undefined);
    if (res === undefined || !res.ok) {
      status(res === undefined ? "policy unavailable (disconnected)" : await responseError(res), true);
      return;
    }
    render((await res.json()) as DashboardPolicy);
  };

  return {
    id: "policy",
    title: "Policy",
    onShow: () => void load(),
    // Another operator's change shows up without a reload.
    onEvent: (e) => {
      if (e.type === "policy.updated" && !(byId("page-policy")).hidden) void load();
    },
  };
}
