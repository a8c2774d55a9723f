import { createServer, type Server } from "node:http";
import type { Registry } from "prom-client";

/** Serves `GET /metrics` in the Prometheus text format (agent and coordinator alike). */
export async function servePrometheus(registry: Registry, listen: string): Promise<{ server: Server; address: string }> {
  const i = listen.lastIndexOf(":");
  const host = listen.slice(0, i);
  const port = Number(listen.slice(i + 1));
  const server = createServer((req, res) => {
    if (req.method !== "GET" || (req.url ?? "").split("?")[0] !== "/metrics") {
      res.writeHead(404).end("not found: try /metrics\n");
      return;
    }
    registry.metrics().then(
      (text) => {
        res.writeHead(200, { "content-type": registry.contentType }).end(text);
      },
      (err: unknown) => {
        res.writeHead(500).end(String(err));
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      resolve();
    });
  });
  const addr = server.address();
  return { server, address: `${host}:${String(typeof addr === "object" && addr !== null ? addr.port : port)}` };
}
