import { createHash } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";

/**
 * A real HTTP file server for artifact pulls (node:http): serves in-memory
 * files with or without Range support, can drop the connection after some
 * bytes of a body, or send slowly (a paced body, so a pull can be killed
 * midway), and records every request (path and Range header).
 */
export interface ArtifactServer {
  readonly url: string;
  /** Every request so far, in order. */
  readonly requests: { path: string; range: string | undefined }[];
  /** `path` → bytes. */
  files: Map<string, Buffer>;
  /** `path` → a Location answered with 302. */
  redirects: Map<string, string>;
  /** Answer Range requests with 206 (default true); false = always 200 and the whole file. */
  ranges: boolean;
  /** Destroy the socket after this many body bytes of the next responses (undefined = never). */
  dropAfterBytes: number | undefined;
  /** Send the body in chunks of this many bytes with `paceMs` between them (0 = at once). */
  chunkBytes: number;
  paceMs: number;
  /**
   * The most body bytes per second the server sends, in total across all responses (0 = no
   * limit): one link shared by every client, as a registry or hub behind a shared uplink.
   */
  rateBytesPerSec: number;
  /** Body bytes written to responses so far (all files): what the origin served. */
  bytesSent: number;
  requestsFor(path: string): { path: string; range: string | undefined }[];
  close(): Promise<void>;
}

export function sha256Hex(b: Buffer): string {
  return createHash("sha256").update(b).digest("hex");
}

/** Deterministic content of `n` bytes (seeded, so two files differ). */
export function bytesOf(n: number, seed = 1): Buffer {
  const b = Buffer.alloc(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    b[i] = x & 0xff;
  }
  return b;
}

function isGone(res: ServerResponse): boolean {
  return res.destroyed;
}

export async function startArtifactServer(): Promise<ArtifactServer> {
  const sockets = new Set<Socket>();
  const state: Omit<ArtifactServer, "url" | "close" | "requestsFor"> = { requests: [], files: new Map(), redirects: new Map(), ranges: true, dropAfterBytes: undefined, chunkBytes: 64 * 1024, paceMs: 0, rateBytesPerSec: 0, bytesSent: 0 };
  // When the shared link is next free (ms, performance.now()): each chunk books its time on it in turn.
  let linkFreeAt = 0;
  const send = async (res: ServerResponse, body: Buffer): Promise<void> => {
    let sent = 0;
    const limit = state.dropAfterBytes;
    while (sent < body.length) {
      if (res.destroyed) return;
      const n = Math.min(state.chunkBytes, body.length - sent);
      if (limit !== undefined && sent + n > limit) {
        res.write(body.subarray(sent, limit));
        state.bytesSent += limit - sent;
        // Flush what was written, then cut the connection mid-body.
        await new Promise((r) => setTimeout(r, 20));
        res.socket?.destroy();
        return;
      }
      if (state.rateBytesPerSec > 0) {
        const now = performance.now();
        const start = Math.max(linkFreeAt, now);
        linkFreeAt = start + (n * 1000) / state.rateBytesPerSec;
        // Sent once its turn on the link has passed: the link never carries more than the rate.
        if (linkFreeAt > now) await new Promise((r) => setTimeout(r, linkFreeAt - now));
        // The client may have gone while this waited its turn.
        if (isGone(res)) return;
      }
      const ok = res.write(body.subarray(sent, sent + n));
      sent += n;
      state.bytesSent += n;
      if (!ok) await new Promise((r) => res.once("drain", r));
      if (state.paceMs > 0) await new Promise((r) => setTimeout(r, state.paceMs));
    }
    res.end();
  };
  const handle = (req: IncomingMessage, res: ServerResponse): void => {
    const path = decodeURIComponent((req.url ?? "/").split("?")[0] ?? "/");
    const range = req.headers.range;
    state.requests.push({ path, range });
    const to = state.redirects.get(path);
    if (to !== undefined) {
      res.writeHead(302, { location: to }).end();
      return;
    }
    const file = state.files.get(path);
    if (file === undefined) {
      res.writeHead(404).end("not found");
      return;
    }
    const m = range === undefined || !state.ranges ? null : /^bytes=(\d+)-$/.exec(range);
    if (m !== null) {
      const start = Number(m[1]);
      if (start >= file.length) {
        res.writeHead(416, { "content-range": `bytes */${String(file.length)}` }).end();
        return;
      }
      res.writeHead(206, { "content-length": String(file.length - start), "content-range": `bytes ${String(start)}-${String(file.length - 1)}/${String(file.length)}`, "accept-ranges": "bytes" });
      void send(res, file.subarray(start));
      return;
    }
    res.writeHead(200, { "content-length": String(file.length), ...(state.ranges ? { "accept-ranges": "bytes" } : {}) });
    void send(res, file);
  };
  const server: Server = createServer(handle);
  server.on("connection", (s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  const out = state as ArtifactServer;
  Object.assign(out, {
    url: `http://127.0.0.1:${String(port)}`,
    requestsFor: (p: string) => state.requests.filter((r) => r.path === p),
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => { r(); }));
    },
  });
  return out;
}
