import { request as httpRequest, type IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import { Code, WardenError, abortReason } from "@warden/common";
import { judgeHttpAnswer } from "./artifact-plan.js";
import type { ArtifactSource } from "./artifact-pull.js";

/** Redirects followed per request (a CDN behind a model hub answers with one or two). */
export const maxRedirects = 5;

function get(url: URL, offset: number, signal: AbortSignal): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const send = url.protocol === "https:" ? httpsRequest : httpRequest;
    const req = send(url, { method: "GET", headers: { ...(offset > 0 ? { range: `bytes=${String(offset)}-` } : {}), "accept-encoding": "identity", "user-agent": "warden-agent" }, signal }, resolve);
    req.on("error", (err) => {
      reject(signal.aborted ? abortReason(signal) : new WardenError(Code.Unavailable, `cannot reach the source: ${(err as NodeJS.ErrnoException).code ?? err.message}`));
    });
    req.end();
  });
}

/**
 * An http(s) URL. A resume sends `Range: bytes=<offset>-` and appends only a
 * 206 whose Content-Range starts there and ends at the artifact's last byte;
 * a 200 (no Range support) restarts from 0; a 416 drops the offset and asks
 * again from 0 (artifact-plan.ts judgeHttpAnswer). Redirects are followed
 * (at most {@link maxRedirects}), never from https to http.
 */
export function httpSource(source: string, sizeBytes: number): ArtifactSource {
  return {
    async open(offset, signal) {
      let url = new URL(source);
      let from = offset;
      for (let hop = 0; ; hop++) {
        const res = await get(url, from, signal);
        const location = res.headers.location;
        if ([301, 302, 303, 307, 308].includes(res.statusCode ?? 0) && location !== undefined) {
          res.resume();
          if (hop >= maxRedirects) throw new WardenError(Code.Unavailable, `more than ${String(maxRedirects)} redirects`);
          const next = new URL(location, url);
          if (url.protocol === "https:" && next.protocol !== "https:") throw new WardenError(Code.Unavailable, `refused a redirect from https to ${next.protocol}`);
          url = next;
          continue;
        }
        const lengthHeader = res.headers["content-length"];
        const v = judgeHttpAnswer({ offset: from, sizeBytes, status: res.statusCode ?? 0, contentRange: res.headers["content-range"], contentLength: lengthHeader === undefined ? undefined : Number(lengthHeader) });
        switch (v.t) {
          case "body":
            // A connection dropped before the pull iterates emits "error" with nobody listening yet: the iteration reports it.
            res.on("error", () => {});
            return { from: v.from, chunks: res };
          case "restart":
            res.resume();
            from = 0;
            continue;
          case "not-found":
            res.resume();
            throw new WardenError(Code.NotFound, `the source answered HTTP ${String(res.statusCode)}`);
          case "mismatch":
            res.resume();
            throw new WardenError(Code.DataLoss, `${v.why}; the partial file was removed`);
          case "unavailable":
            res.resume();
            throw new WardenError(Code.Unavailable, `the source answered ${v.why}`);
        }
      }
    },
  };
}

/** One chunk of the coordinator's store (NodeService-side ArtifactStoreService.ReadArtifact). */
export interface StoreChunk {
  readonly offset: bigint;
  readonly totalBytes: bigint;
  readonly data: Uint8Array;
}

/** Reads a store file from an offset (artifact-store-client.ts over the coordinators' ArtifactStoreService). */
export type StoreReader = (path: string, offset: number, signal: AbortSignal) => AsyncIterable<StoreChunk>;

/**
 * `store:<path>`: the coordinator's artifact store. The first chunk must
 * start at the offset asked for and name the artifact's size (another size
 * is another file: DATA_LOSS); every chunk must follow the previous one.
 */
export function storeSource(reader: StoreReader, path: string, sizeBytes: number, what = "the coordinator's store"): ArtifactSource {
  return {
    async open(offset, signal) {
      const it = reader(path, offset, signal)[Symbol.asyncIterator]();
      const first = await it.next().catch((err: unknown) => {
        if (signal.aborted) throw abortReason(signal);
        const e = WardenError.from(err);
        if (e.code === Code.NotFound) throw new WardenError(Code.NotFound, `${what} has no ${JSON.stringify(path)}`);
        throw new WardenError(Code.Unavailable, `${what}: ${e.rawMessage}`);
      });
      if (first.done === true) throw new WardenError(Code.Unavailable, `${what} sent nothing`);
      const head = first.value;
      if (head.totalBytes !== BigInt(sizeBytes)) throw new WardenError(Code.DataLoss, `${what}'s file has ${String(head.totalBytes)} bytes, the artifact ${String(sizeBytes)}; the partial file was removed`);
      if (head.offset !== BigInt(offset)) throw new WardenError(Code.Unavailable, `asked ${what} for bytes from ${String(offset)}, got ${String(head.offset)}`);
      async function* chunks(): AsyncGenerator<Uint8Array> {
        let at = offset;
        let c: StoreChunk | undefined = head;
        while (c !== undefined) {
          if (c.offset !== BigInt(at)) throw new WardenError(Code.Unavailable, `${what}'s chunk starts at ${String(c.offset)}, expected ${String(at)}`);
          at += c.data.byteLength;
          yield c.data;
          const n: IteratorResult<StoreChunk> = await it.next();
          c = n.done === true ? undefined : n.value;
        }
      }
      return { from: offset, chunks: chunks() };
    },
  };
}
