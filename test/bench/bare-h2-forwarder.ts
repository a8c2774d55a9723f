/**
 * The thinnest gRPC forwarder there is, for the routing benchmark's floor: a
 * `node:http2` server that passes each stream's headers, frames and trailers to
 * one backend and back, unparsed — no routing, tracking, retries or limits.
 * Run as its own process: `node --import tsx bare-h2-forwarder.ts <listen-port> <backend host:port>`;
 * prints `listening <port>` when ready.
 */
import http2 from "node:http2";

const [portArg, backend] = process.argv.slice(2);
if (portArg === undefined || backend === undefined) throw new Error("usage: bare-h2-forwarder <port> <backend host:port>");
const upstream = http2.connect(`http://${backend}`);
upstream.on("error", (err) => {
  process.stderr.write(`upstream: ${err.message}\n`);
});
const passHeaders = ["content-type", "te", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding"];

const server = http2.createServer();
server.on("stream", (stream, headers) => {
  const out: http2.OutgoingHttpHeaders = { ":method": "POST", ":path": headers[":path"] ?? "/" };
  for (const h of passHeaders) if (headers[h] !== undefined) out[h] = headers[h];
  const up = upstream.request(out);
  let trailers: http2.IncomingHttpHeaders | undefined;
  up.on("response", (h) => {
    stream.respond({ ":status": h[":status"] ?? 200, "content-type": h["content-type"] ?? "application/grpc" }, { waitForTrailers: true });
  });
  up.on("trailers", (t) => {
    trailers = t;
  });
  stream.on("wantTrailers", () => {
    const t: http2.OutgoingHttpHeaders = {};
    for (const [k, v] of Object.entries(trailers ?? { "grpc-status": "14" })) if (!k.startsWith(":") && v !== undefined) t[k] = v;
    stream.sendTrailers(t);
  });
  up.on("error", () => {
    stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
  });
  stream.on("error", () => {
    up.close(http2.constants.NGHTTP2_CANCEL);
  });
  stream.pipe(up);
  up.pipe(stream);
});
server.listen(Number(portArg), "127.0.0.1", () => {
  process.stdout.write(`listening ${portArg}\n`);
});
process.on("SIGTERM", () => {
  server.close();
  upstream.close();
  process.exit(0);
});
