/**
 * `compute`, computed at most once per synchronous run: a Prometheus scrape
 * calls every gauge's collect() in one turn (prom-client's Registry.metrics),
 * so gauges that read the same whole-fleet view (every instance, every
 * model's replicas) share one computation instead of walking the fleet once
 * each. The value is dropped at the next microtask, so it is never older
 * than the turn that asked for it.
 */
export function perScrape<T>(compute: () => T): () => T {
  let value: { readonly v: T } | undefined;
  return () => {
    if (value === undefined) {
      value = { v: compute() };
      queueMicrotask(() => {
        value = undefined;
      });
    }
    return value.v;
  };
}
