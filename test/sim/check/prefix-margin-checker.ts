import type { Checker } from "./checker.js";

/**
 * Prefix routing's balance margin: a prefix-routed call never goes to a
 * replica whose calls in flight exceed the least loaded routable replica's
 * by more than the model's `prefixBalanceMargin`. Read from the candidates
 * the route hint was offered (the loader's counts at that moment), so the
 * check sees exactly what the decision saw; a hint that declined (undefined)
 * leaves the call to least-in-flight, which is within any margin.
 */
export function prefixMarginChecker(): Checker {
  return {
    name: "prefix-margin",
    onPrefixPick(ctx, pick) {
      if (pick.chosen === undefined || pick.candidates.length === 0) return;
      const min = Math.min(...pick.candidates.map((c) => c.inFlight));
      const chosen = pick.candidates.find((c) => c.incarnation === pick.chosen);
      if (chosen === undefined) {
        ctx.report("prefix margin", `prefix pick for ${pick.model} chose ${pick.chosen}, which was not among the routable replicas offered`);
        return;
      }
      if (chosen.inFlight - min > pick.marginCalls) {
        ctx.report("prefix margin", `prefix pick for ${pick.model} sent a call to ${chosen.incarnation} with ${String(chosen.inFlight)} in flight while the least loaded replica had ${String(min)} (margin ${String(pick.marginCalls)})`);
      }
    },
  };
}
