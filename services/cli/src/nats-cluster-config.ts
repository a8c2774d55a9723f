/**
 * nats-server config text for one member of a JetStream cluster (what
 * `npm run cluster -- --ha` writes, and the README's 3-server example):
 * client listener, monitoring port, JetStream store dir, and a cluster block
 * whose routes name every member (a server skips the route to itself).
 */

export interface NatsClusterMember {
  /** server_name: unique in the cluster, [-_a-zA-Z0-9]. */
  readonly name: string;
  readonly host: string;
  /** Client port (what `nats.url` lists). */
  readonly port: number;
  /** Route port (server to server). */
  readonly clusterPort: number;
  /** Monitoring port (/varz, /jsz, /healthz); 0 = none. */
  readonly httpPort: number;
  readonly storeDir: string;
}

const namePattern = /^[-_a-zA-Z0-9]{1,64}$/;

/** The config of `self` in a cluster named `clusterName` made of `all` (self included). */
export function natsClusterConfigText(self: NatsClusterMember, all: readonly NatsClusterMember[], clusterName: string): string {
  for (const n of [clusterName, ...all.map((m) => m.name)]) {
    if (!namePattern.test(n)) throw new RangeError(`nats cluster: name "${n}" must be 1–64 of [-_a-zA-Z0-9]`);
  }
  const routes = all.map((m) => `    nats-route://${m.host}:${String(m.clusterPort)}`).join("\n");
  return [
    `server_name: ${self.name}`,
    `listen: ${self.host}:${String(self.port)}`,
    ...(self.httpPort === 0 ? [] : [`http: ${self.host}:${String(self.httpPort)}`]),
    "jetstream {",
    `  store_dir: ${JSON.stringify(self.storeDir)}`,
    "}",
    "cluster {",
    `  name: ${clusterName}`,
    `  listen: ${self.host}:${String(self.clusterPort)}`,
    "  routes: [",
    routes,
    "  ]",
    "}",
    "",
  ].join("\n");
}

/** The coordinators' `nats.url`: every member's client URL, comma-separated. */
export function natsClusterUrl(all: readonly NatsClusterMember[]): string {
  return all.map((m) => `nats://${m.host}:${String(m.port)}`).join(",");
}
