import { createServer } from "node:net";
import { testPortRange } from "./port-range.js";

function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once("error", () => {
      resolve(false);
    });
    srv.listen(port, "127.0.0.1", () => {
      srv.close(() => {
        resolve(true);
      });
    });
  });
}

/**
 * A TCP port on 127.0.0.1 that nothing holds now, from this worker's slice
 * of test ports (port-range.ts), never from the kernel's ephemeral range.
 * Why not port 0: tests give these ports to processes that release and bind
 * them again — an HA member closes its standby listeners and its coordinator
 * binds the same ports at takeover, a nats-server or a coordinator restarts on
 * its port. A port from the ephemeral range can be taken in between as the
 * local port of any outgoing connection on the machine (a NATS client's, a
 * browser's), and Linux then refuses the listen with EADDRINUSE for as long
 * as that connection lives: a takeover that never happens, on a busy machine only.
 */
export async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const { min } = testPortRange(1);
    if (await bindable(min)) return min;
  }
  throw new Error("no free port in this worker's test port slice after 200 tries");
}
