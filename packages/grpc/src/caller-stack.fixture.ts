/**
 * Run with `node --expose-gc --import tsx`: starts a Health Watch stream (held
 * open by the server) from a function whose closure holds a marker object,
 * returns, collects garbage and prints whether the marker was freed while the
 * stream still lives. Used by caller-stack.test.ts.
 */
import { Health } from "@warden/proto";
import { GrpcServer, createClient } from "./index.js";

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error("run with --expose-gc");

const server = new GrpcServer();
const { address } = await server.listen("127.0.0.1:0");
const client = createClient(Health, address);
const stop = new AbortController();

/** The watch begins with `marker` reachable from a frame on the stack (the closure `inner`). */
function startWatch(): { marker: WeakRef<object>; stream: AsyncIterator<unknown> } {
  const marker = { payload: new Array<number>(100_000).fill(7) };
  const keep = (): number => marker.payload.length;
  const inner = (): AsyncIterable<unknown> => {
    keep();
    return client.watch({ service: "" }, { signal: stop.signal });
  };
  const stream = inner()[Symbol.asyncIterator]();
  return { marker: new WeakRef(marker), stream };
}

const { marker, stream } = startWatch();
// The stream is live: its first status arrived and the server holds it open.
await stream.next();
for (let i = 0; i < 3; i++) {
  gc();
  await new Promise((r) => setImmediate(r));
}
process.stdout.write(`${JSON.stringify({ streamLive: true, markerFreed: marker.deref() === undefined })}\n`);
stop.abort();
client.close();
await server.shutdown(1_000);
