import { createServer } from "node:net";
import type { CoordinatorConfig } from "../config/coordinator-config.js";

/** A listener a leader would open that cannot be bound now. */
export interface ListenerProblem {
  /** The config field: "httpListen" or "inferenceListen". */
  readonly field: string;
  readonly address: string;
  /** The bind error (EADDRINUSE, EACCES, EADDRNOTAVAIL …). */
  readonly error: string;
}

function hostPort(address: string): { host: string; port: number } | undefined {
  const colon = address.lastIndexOf(":");
  if (colon <= 0) return undefined;
  const port = Number(address.slice(colon + 1));
  if (!Number.isInteger(port) || port < 0 || port > 65_535) return undefined;
  return { host: address.slice(0, colon).replace(/^\[(.*)\]$/, "$1"), port };
}

function tryBind(address: string): Promise<string | undefined> {
  const hp = hostPort(address);
  // Port 0 binds anywhere; a malformed address is the config check's to refuse.
  if (hp === undefined || hp.port === 0) return Promise.resolve(undefined);
  return new Promise((resolve) => {
    const s = createServer();
    s.once("error", (err: NodeJS.ErrnoException) => {
      resolve(err.code ?? err.message);
    });
    s.listen({ host: hp.host, port: hp.port, exclusive: true }, () => {
      s.close(() => {
        resolve(undefined);
      });
    });
  });
}

/**
 * The listeners a member opens only when it leads (the HTTP API and the lean
 * inference listener; the gRPC `listen` is already held by its standby
 * server), each bound for a moment and closed: a member that cannot open
 * them would win the lease and then fail its takeover. `heldByStandby` names
 * addresses this member already serves while standing by (skipped: they move
 * to the leader in the same process). Empty: every listener can bind.
 */
export async function checkListenersBindable(config: Pick<CoordinatorConfig, "httpListen" | "inferenceListen">, heldByStandby: readonly string[] = []): Promise<ListenerProblem[]> {
  const wanted: { field: string; address: string | undefined }[] = [
    { field: "httpListen", address: config.httpListen },
    { field: "inferenceListen", address: config.inferenceListen },
  ];
  const out: ListenerProblem[] = [];
  for (const w of wanted) {
    if (w.address === undefined || heldByStandby.includes(w.address)) continue;
    const error = await tryBind(w.address);
    if (error !== undefined) out.push({ field: w.field, address: w.address, error });
  }
  return out;
}
