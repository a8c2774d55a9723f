import { invalidArgument } from "@warden/common";

/**
 * The coordinator's NATS inbox prefix: PubAcks and JetStream API answers come
 * back on `<prefix>.>`, so a least-privilege NATS user needs subscribe
 * permission on that alone, not on every `_INBOX.>` (deploy/nats-server.example.conf).
 */
export const defaultCoordinatorInboxPrefix = "_INBOX_coordinator";

/** `nats.inboxPrefix`: one or more subject tokens of [A-Za-z0-9_-], no wildcards. */
export function natsInboxPrefix(v: unknown): { inboxPrefix: string } {
  if (v === undefined) return { inboxPrefix: defaultCoordinatorInboxPrefix };
  if (typeof v !== "string" || !/^[A-Za-z0-9_-]{1,64}(\.[A-Za-z0-9_-]{1,64}){0,7}$/.test(v)) {
    throw invalidArgument("nats.inboxPrefix", `must be subject tokens of [A-Za-z0-9_-] joined by ".", no wildcards, got ${JSON.stringify(v)}`);
  }
  return { inboxPrefix: v };
}
