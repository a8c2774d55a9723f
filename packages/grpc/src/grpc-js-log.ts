import * as grpc from "@grpc/grpc-js";

/**
 * grpc-js writes its own diagnostics to stderr (`E No address added out of
 * total 1 resolved` before Warden's clear "address already in use"). This sends
 * them to `sink` instead — Warden's logger at debug level — so an operator sees
 * one message per problem, and `--log-level debug` still shows grpc-js's view.
 * An operator who sets `GRPC_VERBOSITY` or `GRPC_TRACE` keeps grpc-js's own output.
 */
export function routeGrpcJsLogs(sink: (message: string) => void, env: NodeJS.ProcessEnv = process.env): void {
  if (env.GRPC_VERBOSITY !== undefined || env.GRPC_TRACE !== undefined) return;
  const write = (...args: unknown[]): void => {
    sink(args.map((a) => (typeof a === "string" ? a : a instanceof Error ? a.message : JSON.stringify(a))).join(" "));
  };
  grpc.setLogger({ error: write, info: write, debug: write });
}
