import { describe, expect, it } from "vitest";
import { maxPeerTicketLifetimeMs, mintPeerTicket, peerTicketRefusal } from "./peer-ticket.js";

const key = Buffer.alloc(32, 7);
const claim = { sha256: "a".repeat(64), requesterNodeId: "r", holderNodeId: "h", expiresAtMs: 1_000_000 };

describe("peer tickets", () => {
  it("a ticket is good for exactly its claim, until it expires", () => {
    const t = mintPeerTicket(key, claim);
    expect(t).toMatch(/^[0-9a-f]{64}$/);
    expect(peerTicketRefusal(key, claim, t, 999_999)).toBeUndefined();
    expect(peerTicketRefusal(key, claim, t, 1_000_000)).toBe("the ticket has expired");
    for (const other of [{ ...claim, sha256: "b".repeat(64) }, { ...claim, requesterNodeId: "x" }, { ...claim, holderNodeId: "x" }, { ...claim, expiresAtMs: 1_000_001 }]) {
      expect(peerTicketRefusal(key, other, t, 0)).toBe("the ticket was not granted for this digest, requester and holder");
    }
    expect(peerTicketRefusal(Buffer.alloc(32, 8), claim, t, 0)).toBe("the ticket was not granted for this digest, requester and holder");
  });

  it("refuses a malformed ticket and one that lives too long", () => {
    expect(peerTicketRefusal(key, claim, "", 0)).toMatch(/64 lowercase hex/);
    expect(peerTicketRefusal(key, claim, mintPeerTicket(key, claim).toUpperCase(), 0)).toMatch(/64 lowercase hex/);
    expect(peerTicketRefusal(key, claim, mintPeerTicket(key, claim), claim.expiresAtMs - maxPeerTicketLifetimeMs - 1)).toMatch(/more than 10 minutes/);
  });
});
