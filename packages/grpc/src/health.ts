import { Code, WardenError } from "@warden/common";
import { HealthCheckResponse_ServingStatus as ServingStatus } from "@warden/proto";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Health, HealthCheckResponseSchema, HealthListResponseSchema } from "@warden/proto";
import type { ServiceImpl } from "./types.js";

export { ServingStatus };

/** Services one Health/List answers at most (grpc-proto's bound: above it, RESOURCE_EXHAUSTED). */
export const maxHealthListServices = 100;

/**
 * The grpc.health.v1 state of a server: one status per service name ("" is
 * the whole server). Watchers get every change.
 */
export class HealthStatus {
  private readonly statuses = new Map<string, ServingStatus>();
  private readonly watchers = new Set<() => void>();
  private ended = false;

  set(service: string, status: ServingStatus): void {
    if (this.statuses.get(service) === status) return;
    this.statuses.set(service, status);
    for (const w of this.watchers) w();
  }

  get(service: string): ServingStatus | undefined {
    return this.statuses.get(service);
  }

  /** Marks every known service NOT_SERVING (used when shutting down). */
  setAllNotServing(): void {
    for (const k of [...this.statuses.keys()]) this.set(k, ServingStatus.NOT_SERVING);
  }

  /**
   * Shutdown: every service NOT_SERVING, and each Watch stream ends with
   * UNAVAILABLE once it has sent that (the spec's "retry with backoff"), so
   * open watches do not hold the server's drain until its grace runs out.
   */
  shutdown(): void {
    this.setAllNotServing();
    this.ended = true;
    for (const w of this.watchers) w();
  }

  /** The Health service implementation backed by this state. */
  impl(): ServiceImpl<typeof Health> {
    const self = this;
    return {
      async check(req): Promise<MessageInitShape<typeof HealthCheckResponseSchema>> {
        const s = self.statuses.get(req.service);
        if (s === undefined) throw new WardenError(Code.NotFound, `service: unknown service "${req.service}"`);
        return { status: s };
      },
      async list(): Promise<MessageInitShape<typeof HealthListResponseSchema>> {
        // The server-wide "" entry is listed too, as grpc-go and grpc-java do.
        if (self.statuses.size > maxHealthListServices) throw new WardenError(Code.ResourceExhausted, `${String(self.statuses.size)} services exceed Health/List's bound of ${String(maxHealthListServices)}; use Check per service`);
        const statuses: Record<string, { status: ServingStatus }> = {};
        for (const [service, status] of self.statuses) statuses[service] = { status };
        return { statuses };
      },
      async *watch(req, ctx): AsyncIterable<MessageInitShape<typeof HealthCheckResponseSchema>> {
        let last: ServingStatus | undefined;
        let wake: (() => void) | undefined;
        const notify = (): void => {
          wake?.();
        };
        self.watchers.add(notify);
        const onAbort = (): void => {
          wake?.();
        };
        ctx.signal.addEventListener("abort", onAbort, { once: true });
        try {
          while (!ctx.signal.aborted) {
            const s = self.statuses.get(req.service) ?? ServingStatus.SERVICE_UNKNOWN;
            if (s !== last) {
              last = s;
              yield { status: s };
            }
            if (self.ended) throw new WardenError(Code.Unavailable, "server shutting down");
            await new Promise<void>((resolve) => {
              wake = resolve;
            });
          }
        } finally {
          self.watchers.delete(notify);
          ctx.signal.removeEventListener("abort", onAbort);
        }
      },
    };
  }
}
