import { readCaBundle, type CreateClientOptions } from "@warden/grpc";
import type { CatalogEntry } from "./catalog-entry.js";

/** CA bundles by path, read once: readiness polls and Health checks run per backend and per tick. */
const cache = new Map<string, Buffer>();

/** Client options for the agent's calls to a backend of `entry` (TLS when its catalog entry says so). */
export function backendClientTls(entry: CatalogEntry | undefined): Pick<CreateClientOptions, "tls"> {
  const t = entry?.tls;
  if (t === undefined) return {};
  let ca = cache.get(t.caFile);
  if (ca === undefined) {
    ca = readCaBundle(t.caFile, "catalog.tls.ca");
    cache.set(t.caFile, ca);
  }
  return { tls: { ca, ...(t.serverName === undefined ? {} : { serverName: t.serverName }) } };
}
