import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type ClientHttp2Session } from "node:http2";
import { connect as tcpConnect } from "node:net";
import { isWardenError } from "@warden/common";
import { GrpcServer, LeanGrpcServer, defaultPeerCaps, parsePeerCaps, type PeerCaps } from "./index.js";

/*
 * The per-peer caps of both gRPC servers over real loopback HTTP/2: one
 * address's connections past its cap and past the listener's total are
 * closed on accept while another address is served; a connection that never
 * sends the HTTP/2 preface is closed after the handshake timeout; a session
 * with no call open is closed after the idle timeout, one with a call open
 * is not. 127.0.0.2 and 127.0.0.3 are other peers than 127.0.0.1 on Linux.
 */

type Kind = "grpcJs" | "lean";

function serverOf(kind: Kind, peerCaps: PeerCaps): GrpcServer | LeanGrpcServer {
  return kind === "grpcJs" ? new GrpcServer({ peerCaps }) : new LeanGrpcServer({ peerCaps });
}

/** An HTTP/2 session from `from`: "served" once the server's SETTINGS arrive, "closed" if it closes first. */
function session(address: string, from: string): { s: ClientHttp2Session; outcome: Promise<"served" | "closed">; closed: Promise<void> } {
  const colon = address.lastIndexOf(":");
  const s = connect(`http://${address}`, { createConnection: () => tcpConnect({ host: address.slice(0, colon), port: Number(address.slice(colon + 1)), localAddress: from }) });
  s.on("error", () => undefined);
  const closed = new Promise<void>((resolve) => s.once("close", resolve));
  const outcome = new Promise<"served" | "closed">((resolve) => {
    s.once("remoteSettings", () => {
      resolve("served");
    });
    void closed.then(() => {
      resolve("closed");
    });
  });
  return { s, outcome, closed };
}

describe("peer caps: settings", () => {
  it("defaults, and out-of-range values are INVALID_ARGUMENT naming limits.<key>", () => {
    expect(parsePeerCaps({})).toEqual(defaultPeerCaps);
    expect(defaultPeerCaps).toEqual({ maxConnectionsPerPeer: 64, maxConnections: 4096, handshakeTimeoutMs: 10_000, idleTimeoutMs: 300_000 });
    expect(parsePeerCaps({ maxConnectionsPerPeer: 8, maxConnections: 100, handshakeTimeout: "2s", idleConnectionTimeout: "1m" })).toEqual({ maxConnectionsPerPeer: 8, maxConnections: 100, handshakeTimeoutMs: 2_000, idleTimeoutMs: 60_000 });
    const bad: [Record<string, unknown>, string][] = [
      [{ maxConnectionsPerPeer: 0 }, "limits.maxConnectionsPerPeer"],
      [{ maxConnectionsPerPeer: "8" }, "limits.maxConnectionsPerPeer"],
      [{ maxConnections: 65_537 }, "limits.maxConnections"],
      [{ handshakeTimeout: "10ms" }, "limits.handshakeTimeout"],
      [{ handshakeTimeout: "forever" }, "limits.handshakeTimeout"],
      [{ idleConnectionTimeout: "2d" }, "limits.idleConnectionTimeout"],
    ];
    for (const [raw, field] of bad) {
      let err: unknown;
      try {
        parsePeerCaps(raw);
      } catch (e) {
        err = e;
      }
      expect(isWardenError(err) && err.details["field"], JSON.stringify(raw)).toBe(field);
    }
  });
});

describe.each(["grpcJs", "lean"] as const)("peer caps on the %s server", (kind) => {
  const capped = serverOf(kind, { maxConnectionsPerPeer: 2, maxConnections: 3, handshakeTimeoutMs: 60_000, idleTimeoutMs: 60_000 });
  const timed = serverOf(kind, { maxConnectionsPerPeer: 64, maxConnections: 4096, handshakeTimeoutMs: 1_000, idleTimeoutMs: 1_000 });
  const at = { capped: "", timed: "" };
  beforeAll(async () => {
    at.capped = (await capped.listen("127.0.0.1:0")).address;
    at.timed = (await timed.listen("127.0.0.1:0")).address;
  });
  afterAll(async () => {
    await Promise.all([capped.shutdown(500), timed.shutdown(500)]);
  });

  it("closes one address's connection past its cap, and any past the listener's total, while another address is served", async () => {
    const open: ClientHttp2Session[] = [];
    try {
      const a1 = session(at.capped, "127.0.0.1");
      const a2 = session(at.capped, "127.0.0.1");
      open.push(a1.s, a2.s);
      expect([await a1.outcome, await a2.outcome]).toEqual(["served", "served"]);
      const a3 = session(at.capped, "127.0.0.1");
      open.push(a3.s);
      expect(await a3.outcome).toBe("closed");
      const b1 = session(at.capped, "127.0.0.2");
      open.push(b1.s);
      expect(await b1.outcome).toBe("served");
      // Three open: the listener's total; a fourth address is refused too.
      const c1 = session(at.capped, "127.0.0.3");
      open.push(c1.s);
      expect(await c1.outcome).toBe("closed");
      // A closed connection frees its peer's slot.
      a1.s.destroy();
      await a1.closed;
      let again: "served" | "closed" = "closed";
      for (let i = 0; i < 100 && again === "closed"; i++) {
        const a4 = session(at.capped, "127.0.0.1");
        open.push(a4.s);
        again = await a4.outcome;
        if (again === "closed") await new Promise((r) => setTimeout(r, 20));
      }
      expect(again).toBe("served");
    } finally {
      for (const s of open) s.destroy();
    }
  });

  it("closes a connection that never sends the HTTP/2 preface after the handshake timeout", async () => {
    const colon = at.timed.lastIndexOf(":");
    const sock = tcpConnect({ host: at.timed.slice(0, colon), port: Number(at.timed.slice(colon + 1)) });
    sock.on("error", () => undefined);
    // Read (and drop) the server's SETTINGS: a paused socket would never see the server's end.
    sock.resume();
    // Resolves only when the server closes it: without the cap this waits for the test's own timeout.
    await new Promise<void>((resolve) => sock.once("close", () => { resolve(); }));
    expect(sock.destroyed).toBe(true);
  }, 30_000);

  it("closes a session with no call open after the idle timeout, and not one with a call open", async () => {
    // The busy session opens first: were open calls ignored, its idle timer would fire before the idle one's.
    // Its call goes out with the connection preface, so the server never sees it idle.
    const busy = session(at.timed, "127.0.0.1");
    const watch = busy.s.request({ ":method": "POST", ":path": "/grpc.health.v1.Health/Watch", "content-type": "application/grpc", te: "trailers" });
    watch.on("error", () => undefined);
    let watchEnded = false;
    watch.once("close", () => {
      watchEnded = true;
    });
    // An empty HealthCheckRequest (service ""): the reply stream stays open.
    watch.end(Buffer.from([0, 0, 0, 0, 0]));
    await new Promise<void>((resolve) => watch.once("data", () => { resolve(); }));
    expect(await busy.outcome).toBe("served");
    const idle = session(at.timed, "127.0.0.1");
    try {
      expect(await idle.outcome).toBe("served");
      await idle.closed;
      expect(watchEnded).toBe(false);
      expect(busy.s.closed || busy.s.destroyed).toBe(false);
    } finally {
      watch.close();
      busy.s.destroy();
      idle.s.destroy();
    }
  }, 30_000);
});
