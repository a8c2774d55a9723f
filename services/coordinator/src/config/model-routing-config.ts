import { invalidArgument } from "@warden/common";
import { defaultRouting, type ModelRouting } from "@warden/loader";

/** The keys of a models[] entry this module reads. */
export const modelRoutingFields = ["routing", "prefixBalanceMargin"] as const;

const routingModes = ["least-in-flight", "prefix"] as const;

/** `prefixBalanceMargin`: calls in flight a prefix match may have above the least loaded replica. */
export const prefixMarginBounds = Object.freeze({ default: 2, max: 65_536 });

/**
 * `routing: least-in-flight | prefix` and, with `prefix`,
 * `prefixBalanceMargin` (an integer 0–65 536, default 2). A margin on a
 * model not routed by prefix is refused: it would do nothing.
 */
export function parseModelRouting(v: Readonly<Record<string, unknown>>, field: string): ModelRouting {
  const raw = v["routing"] ?? "least-in-flight";
  const mode = routingModes.find((m) => m === raw);
  if (mode === undefined) throw invalidArgument(`${field}.routing`, `must be one of ${routingModes.join(", ")}, got ${JSON.stringify(raw).slice(0, 64)}`);
  const margin = v["prefixBalanceMargin"];
  if (mode === "least-in-flight") {
    if (margin !== undefined) throw invalidArgument(`${field}.prefixBalanceMargin`, "applies only with routing: prefix");
    return defaultRouting;
  }
  if (margin !== undefined && (typeof margin !== "number" || !Number.isInteger(margin) || margin < 0 || margin > prefixMarginBounds.max)) {
    throw invalidArgument(`${field}.prefixBalanceMargin`, `must be an integer in [0, ${String(prefixMarginBounds.max)}], got ${JSON.stringify(margin).slice(0, 64)}`);
  }
  return { mode, balanceMarginCalls: typeof margin === "number" ? margin : prefixMarginBounds.default };
}
