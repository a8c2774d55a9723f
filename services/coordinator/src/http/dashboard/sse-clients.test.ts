import { createServer, get, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { connect, type AddressInfo, type Socket } from "node:net";
import { setImmediate as tick } from "node:timers/promises";
import { afterEach, describe, expect, it } from "vitest";
import { SseClients, sseFrame, type SseAdmission } from "./sse-clients.js";

/** A real HTTP server whose every request becomes a stream of `clients` (or is refused when full). */
async function serve(clients: SseClients): Promise<{ server: Server; port: number; admissions: SseAdmission[] }> {
  const admissions: SseAdmission[] = [];
  const server = createServer((_req: IncomingMessage, res: ServerResponse) => {
    const a = clients.admit(res, sseFrame("snapshot", "{}"));
    admissions.push(a);
    if (a.t === "full") res.writeHead(503).end();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { server, port: (server.address() as AddressInfo).port, admissions };
}

async function until(what: string, fn: () => boolean, timeoutMs = 30_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!fn()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const open: (() => void)[] = [];
afterEach(() => {
  for (const c of open.splice(0)) c();
});

describe("dashboard SSE streams", () => {
  it("admits up to maxClients and refuses the next with 503; a closed stream frees its slot", async () => {
    const clients = new SseClients({ maxClients: 2, maxPendingBytes: 1 << 20 });
    const { server, port, admissions } = await serve(clients);
    open.push(() => server.close());
    const statuses: number[] = [];
    const responses: IncomingMessage[] = [];
    const one = (): Promise<void> =>
      new Promise((resolve) => {
        const req = get({ host: "127.0.0.1", port, path: "/" }, (res) => {
          statuses.push(res.statusCode ?? 0);
          responses.push(res);
          res.resume();
          resolve();
        });
        open.push(() => req.destroy());
      });
    await one();
    await one();
    await one();
    expect(statuses).toEqual([200, 200, 503]);
    expect(admissions.map((a) => a.t)).toEqual(["admitted", "admitted", "full"]);
    expect(clients.size).toBe(2);
    responses[0]?.destroy();
    await until("the closed stream to leave", () => clients.size === 1);
    await one();
    expect(statuses[3]).toBe(200);
  });

  it("drops a client that stops reading once its pending bytes pass the bound, and keeps feeding one that reads", async () => {
    const dropped: number[] = [];
    const clients = new SseClients({ maxClients: 4, maxPendingBytes: 256 * 1024 }, (id) => dropped.push(id));
    const { server, port } = await serve(clients);
    open.push(() => server.close());
    // The reader: counts every frame it receives.
    let received = 0;
    await new Promise<void>((resolve) => {
      const req = get({ host: "127.0.0.1", port, path: "/" }, (res) => {
        res.setEncoding("utf8").on("data", (d: string) => {
          received += d.split("event: tick").length - 1;
        });
        resolve();
      });
      open.push(() => req.destroy());
    });
    // The slow one: sends its request, then never reads a byte.
    const slow: Socket = connect(port, "127.0.0.1");
    open.push(() => slow.destroy());
    slow.write(`GET / HTTP/1.1\r\nhost: x\r\n\r\n`);
    slow.pause();
    await until("both streams open", () => clients.size === 2);
    const frame = sseFrame("tick", JSON.stringify("x".repeat(32 * 1024)));
    let sent = 0;
    // Bounded: the kernel's socket buffers fill first (a few MiB on loopback), then the bound trips.
    while (dropped.length === 0 && sent < 4_000) {
      clients.broadcast(frame);
      sent++;
      await tick();
    }
    expect(dropped).toHaveLength(1);
    expect(clients.dropped).toBe(1);
    expect(clients.size).toBe(1);
    clients.broadcast(frame);
    sent++;
    await until("the reader to receive every frame", () => received === sent);
  });

  it("close ends every stream and refuses new ones", async () => {
    const clients = new SseClients({ maxClients: 4, maxPendingBytes: 1 << 20 });
    const { server, port } = await serve(clients);
    open.push(() => server.close());
    const ended = new Promise<string>((resolve) => {
      const req = get({ host: "127.0.0.1", port, path: "/" }, (res) => {
        let body = "";
        res.setEncoding("utf8").on("data", (d: string) => (body += d));
        res.on("end", () => { resolve(body); });
      });
      open.push(() => req.destroy());
    });
    await until("the stream to open", () => clients.size === 1);
    clients.broadcast(sseFrame("event", "{\"n\":1}"));
    clients.close();
    expect(await ended).toBe('event: snapshot\ndata: {}\n\nevent: event\ndata: {"n":1}\n\n');
    const status = await new Promise<number>((resolve) => {
      const req = get({ host: "127.0.0.1", port, path: "/" }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      open.push(() => req.destroy());
    });
    expect(status).toBe(503);
  });
});
