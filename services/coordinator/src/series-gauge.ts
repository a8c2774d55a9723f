import { Gauge, type GaugeConfiguration } from "prom-client";

type GaugeValues<L extends string> = Awaited<ReturnType<Gauge<L>["get"]>>["values"];

/**
 * A gauge whose series come whole from `series()` at each scrape, counted by
 * the caller. prom-client's own `set` hashes each series' labels into its
 * table and `reset` drops the table again, every scrape: at 10 000 nodes the
 * two per-node gauges paid that for 20 000 series, about a quarter of a
 * scrape in process. The text is prom-client's as for any gauge; `set`
 * and `inc` have no effect on what it shows (nothing calls them).
 */
export class SeriesGauge<L extends string> extends Gauge<L> {
  constructor(
    config: Omit<GaugeConfiguration<L>, "collect">,
    private readonly series: () => GaugeValues<L>,
  ) {
    super(config);
  }

  override async get(): Promise<Awaited<ReturnType<Gauge<L>["get"]>>> {
    return { ...(await super.get()), values: this.series() };
  }
}
