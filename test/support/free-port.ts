import { createServer } from "node:net";

/** A TCP port on 127.0.0.1 that was free a moment ago (bind 0, read, close). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      const port = typeof a === "object" && a !== null ? a.port : 0;
      s.close(() => {
        resolve(port);
      });
    });
  });
}
