/** The swarm bench's reading of the coordinator's garbage collections from its /metrics text. */

/** A coordinator's garbage collections so far by kind: prom-client's gc histogram on its /metrics, count and seconds. */
export interface GcTotals {
  readonly minor: { readonly count: number; readonly seconds: number };
  readonly major: { readonly count: number; readonly seconds: number };
}

export function gcTotalsOf(text: string): GcTotals | undefined {
  const of = (kind: string, what: "count" | "sum"): number => Number(text.split("\n").find((l) => l.startsWith(`warden_coordinator_nodejs_gc_duration_seconds_${what}{kind="${kind}"} `))?.split(" ")[1] ?? "NaN");
  const minor = { count: of("minor", "count"), seconds: of("minor", "sum") };
  if (Number.isNaN(minor.count)) return undefined;
  // prom-client writes a kind's series only once it has seen one: no major series yet is no major collection yet.
  const major = { count: of("major", "count"), seconds: of("major", "sum") };
  return { minor, major: Number.isNaN(major.count) ? { count: 0, seconds: 0 } : major };
}

/** Collections between two readings (zeros when either is missing). */
export function gcBetween(a: GcTotals | undefined, b: GcTotals | undefined): GcTotals {
  if (a === undefined || b === undefined) return { minor: { count: 0, seconds: 0 }, major: { count: 0, seconds: 0 } };
  return { minor: { count: b.minor.count - a.minor.count, seconds: b.minor.seconds - a.minor.seconds }, major: { count: b.major.count - a.major.count, seconds: b.major.seconds - a.major.seconds } };
}
