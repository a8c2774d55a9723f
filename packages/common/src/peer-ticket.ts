import { createHmac, timingSafeEqual } from "node:crypto";
import { isHex64 } from "./artifact-spec.js";

/**
 * Peer fetch tickets (services/agent/docs/artifacts.md, "Peer-to-peer fetch"):
 * a capability the coordinator grants a requester to read one digest from one
 * holder until a deadline. It is an HMAC-SHA256 under the holder's own peer key
 * (random, made by the holder, told only to the coordinator), so no other node
 * can mint one and the holder checks it without asking anybody.
 */
export interface PeerTicketClaim {
  readonly sha256: string;
  readonly requesterNodeId: string;
  readonly holderNodeId: string;
  readonly expiresAtMs: number;
}

/** A ticket's longest life: a holder refuses one expiring later than this from its now. */
export const maxPeerTicketLifetimeMs = 10 * 60_000;
/** Bytes of a peer key (hex in the key file: 64 characters). */
export const peerKeyBytes = 32;

function mac(key: Uint8Array, c: PeerTicketClaim): Buffer {
  return createHmac("sha256", key).update(`warden-peer-ticket/v1\n${c.sha256}\n${c.requesterNodeId}\n${c.holderNodeId}\n${String(c.expiresAtMs)}`).digest();
}

/** The ticket (64 lowercase hex) for a claim, under the holder's key. */
export function mintPeerTicket(key: Uint8Array, c: PeerTicketClaim): string {
  return mac(key, c).toString("hex");
}

/** Why a ticket is refused, or undefined when it is valid at `nowMs`. Constant-time in the MAC. */
export function peerTicketRefusal(key: Uint8Array, c: PeerTicketClaim, ticket: string, nowMs: number): string | undefined {
  if (!isHex64(ticket)) return "the ticket is not 64 lowercase hex characters";
  if (!timingSafeEqual(Buffer.from(ticket, "hex"), mac(key, c))) return "the ticket was not granted for this digest, requester and holder";
  if (c.expiresAtMs <= nowMs) return "the ticket has expired";
  if (c.expiresAtMs > nowMs + maxPeerTicketLifetimeMs) return `the ticket expires more than ${String(maxPeerTicketLifetimeMs / 60_000)} minutes ahead`;
  return undefined;
}
