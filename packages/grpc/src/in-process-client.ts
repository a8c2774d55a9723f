import { Metadata } from "@grpc/grpc-js";
import { create, type DescService } from "@bufbuild/protobuf";
import { Code, WardenError, abortReason, deadlineTimer, raceSignal } from "@warden/common";
import type { CallOptions, Client, HandlerContext, ServiceImpl } from "./types.js";

/** The abort reason of a call that completed; shared so no stack trace is captured per call. */
const callCompleted = new WardenError(Code.Canceled, "call completed");

function context(opts: CallOptions | undefined): { ctx: HandlerContext; done: () => void } {
  const ctl = new AbortController();
  const cleanups: (() => void)[] = [];
  const deadlines: number[] = [];
  if (opts?.timeoutMs !== undefined) deadlines.push(Date.now() + opts.timeoutMs);
  if (opts?.deadlineAtMs !== undefined) deadlines.push(opts.deadlineAtMs);
  const deadlineAtMs = deadlines.length > 0 ? Math.min(...deadlines) : undefined;
  if (deadlineAtMs !== undefined) {
    cleanups.push(
      deadlineTimer(deadlineAtMs - Date.now(), () => {
        ctl.abort(new WardenError(Code.DeadlineExceeded, "call deadline exceeded"));
      }),
    );
  }
  const signal = opts?.signal;
  if (signal !== undefined) {
    const onAbort = (): void => {
      ctl.abort(abortReason(signal));
    };
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
    cleanups.push(() => {
      signal.removeEventListener("abort", onAbort);
    });
  }
  const ctx: HandlerContext = {
    signal: ctl.signal,
    metadata: opts?.metadata ?? new Metadata(),
    peer: "in-process",
    deadlineAtMs,
    responseHeader: new Metadata(),
    responseTrailer: new Metadata(),
  };
  return {
    ctx,
    done() {
      for (const c of cleanups) c();
      if (!ctl.signal.aborted) ctl.abort(callCompleted);
    },
  };
}

/**
 * A client that calls a service implementation in process, with the same
 * shape and semantics as a gRPC client (deadlines, AbortSignal, WardenError
 * codes, messages built with `create`). The coordinator reaches its embedded
 * agent this way (placement `local`), through the same AgentService
 * interface as a remote agent.
 */
export function inProcessClient<T extends DescService>(svc: T, impl: ServiceImpl<T>): Client<T> {
  const handlers = impl as unknown as Record<string, (input: unknown, ctx: HandlerContext) => unknown>;
  const out: Record<string, unknown> = { close() {} };
  for (const m of svc.methods) {
    const h = handlers[m.localName];
    if (h === undefined) continue;
    const input = (v: unknown): unknown => create(m.input, v as never);
    const output = (v: unknown): unknown => create(m.output, v as never);
    switch (m.methodKind) {
      case "unary":
        out[m.localName] = async (req: unknown, opts?: CallOptions) => {
          const { ctx, done } = context(opts);
          try {
            // Errors reach the caller as WardenErrors, as they would through gRPC.
            return output(await raceSignal(Promise.resolve(h(input(req), ctx)), ctx.signal).catch((err: unknown) => Promise.reject(WardenError.from(err))));
          } finally {
            done();
          }
        };
        break;
      case "server_streaming":
        out[m.localName] = (req: unknown, opts?: CallOptions) => ({
          async *[Symbol.asyncIterator]() {
            const { ctx, done } = context(opts);
            const it = (h(input(req), ctx) as AsyncIterable<unknown>)[Symbol.asyncIterator]();
            try {
              for (;;) {
                const r = await raceSignal(it.next(), ctx.signal).catch((err: unknown) => Promise.reject(WardenError.from(err)));
                if (r.done === true) return;
                yield output(r.value);
              }
            } finally {
              done();
              void it.return?.();
            }
          },
        });
        break;
      case "bidi_streaming":
      case "client_streaming":
        // Not needed in process (only reflection streams both ways).
        break;
    }
  }
  return out as Client<T>;
}
