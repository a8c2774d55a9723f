/**
 * What the Nodes page says about its buttons' presses, in words: while the
 * call runs ("draining gpu-a…"), when it answers and when it is refused.
 * Pure, so the words are checked without a browser (node-action-text.test.ts).
 */

/** A press of one of the Nodes page's buttons: the Placement panel's Load/Unload, a row's Unload, a card's Drain/Undrain. */
export type NodeAction =
  | { readonly t: "load"; readonly model: string }
  | { readonly t: "unload"; readonly model: string }
  | { readonly t: "drain"; readonly nodeId: string }
  | { readonly t: "undrain"; readonly nodeId: string };

/** The action's answer as /api/dashboard/actions/<t> sends it (dashboard-actions.ts runAction); read defensively. */
export interface NodeActionAnswer {
  readonly outcome?: unknown;
  readonly instance?: { readonly nodeId?: unknown };
  readonly drainRemaining?: unknown;
}

/** The thing pressed on: the model or the node. */
function target(a: NodeAction): string {
  return a.t === "load" || a.t === "unload" ? a.model : a.nodeId;
}

/** While the call runs. */
export function pendingText(a: NodeAction): string {
  switch (a.t) {
    case "load":
      return `loading ${a.model}…`;
    case "unload":
      return `unloading ${a.model}…`;
    case "drain":
      return `draining ${a.nodeId}…`;
    case "undrain":
      return `undraining ${a.nodeId}…`;
  }
}

function plural(n: number, word: string): string {
  return `${String(n)} ${word}${n === 1 ? "" : "s"}`;
}

/** Once the call answered. A drain answers at once: its instances move off after it (the card says how many are left). */
export function doneText(a: NodeAction, r: NodeActionAnswer): string {
  switch (a.t) {
    case "load":
      return `loaded ${a.model}${typeof r.instance?.nodeId === "string" && r.instance.nodeId !== "" ? ` on ${r.instance.nodeId}` : ""}`;
    case "unload":
      return `unloaded ${a.model}${typeof r.outcome === "string" && r.outcome !== "" ? `: ${r.outcome}` : ""}`;
    case "drain": {
      const left = typeof r.drainRemaining === "number" ? r.drainRemaining : 0;
      return `${a.nodeId} is draining: takes no new loads${left > 0 ? `, ${plural(left, "instance")} to move off` : ", nothing left on it"}`;
    }
    case "undrain":
      return `${a.nodeId} takes loads again`;
  }
}

/** The call was refused (`why`: the error's code and message) or never answered (`reached` false). */
export function failedText(a: NodeAction, why: string, reached = true): string {
  return `${a.t} of ${target(a)} ${a.t === "load" || !reached ? "failed" : "refused"} — ${why}`;
}
