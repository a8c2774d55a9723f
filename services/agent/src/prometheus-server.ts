import { createServer, type Server } from "node:http";
import type { Registry } from "prom-client";

/**
 * Serves `GET /metrics` in the Prometheus text format (agent and coordinator
 * alike). `registries` may be a function: asked on every scrape, so an HA
 * member serves the coordinator's registry only while it leads.
 */
export async function servePrometheus(registries: Registry | (() => readonly Registry[]), listen: string): Promise<{ server: Server; address: string }> {
  const i = listen.lastIndexOf(":");
  const host = listen.slice(0, i).replace(/^\[(.*)\]$/, "$1");
  const port = Number(listen.slice(i + 1));
  const current = typeof registries === "function" ? registries : (): readonly Registry[] => [registries];
  const server = createServer((req, res) => {
    if (req.method !== "GET" || (req.url ?? "").split("?")[0] !== "/metrics") {
      res.writeHead(404).end("not found: try /metrics\n");
      return;
    }
    const rs = current();
    Promise.all(rs.map((r) => r.metrics())).then(
      (texts) => {
        res.writeHead(200, { "content-type": rs[0]?.contentType ?? "text/plain; version=0.0.4; charset=utf-8" }).end(texts.join("\n"));
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
  return { server, address: `${listen.slice(0, i)}:${String(typeof addr === "object" && addr !== null ? addr.port : port)}` };
}
