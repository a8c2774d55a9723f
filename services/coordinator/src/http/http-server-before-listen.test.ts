import { createConnection } from "node:net";
import { describe, expect, it } from "vitest";
import { nullLogger } from "@warden/common";
import { freePort } from "../../../../test/support/free-port.js";
import { defaultHttpLimits } from "./http-settings.js";
import { startHttpServer } from "./http-server.js";

/** Whether something accepts a TCP connection on 127.0.0.1:port now. */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createConnection({ host: "127.0.0.1", port }, () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => { resolve(false); });
  });
}

describe("startHttpServer's beforeListen (an HA member taking the lead releases its standby listener here)", () => {
  it("runs after every route is registered and the app is ready, before the port is bound; the routes answer once it is", async () => {
    const port = await freePort();
    const order: string[] = [];
    let boundDuringBeforeListen: boolean | undefined;
    const server = await startHttpServer({
      listen: `127.0.0.1:${String(port)}`,
      limits: defaultHttpLimits,
      tls: undefined,
      insecure: false,
      checkHost: true,
      log: nullLogger,
      routes: [
        async (app) => {
          // A registrar that takes a while (the leader's dashboard and API): all of it before the port is given up.
          await new Promise((r) => setTimeout(r, 50));
          app.get("/ping", async () => "pong");
          order.push("routes");
        },
      ],
      beforeListen: async () => {
        order.push("beforeListen");
        boundDuringBeforeListen = await accepts(port);
      },
    });
    try {
      expect(order).toEqual(["routes", "beforeListen"]);
      expect(boundDuringBeforeListen).toBe(false);
      expect(await (await fetch(`http://127.0.0.1:${String(port)}/ping`)).text()).toBe("pong");
    } finally {
      await server.close();
    }
  });

  it("a beforeListen that fails ends the start: nothing is bound", async () => {
    const port = await freePort();
    await expect(startHttpServer({ listen: `127.0.0.1:${String(port)}`, limits: defaultHttpLimits, tls: undefined, insecure: false, checkHost: true, log: nullLogger, routes: [], beforeListen: () => Promise.reject(new Error("standby listener would not close")) })).rejects.toThrow("standby listener would not close");
    expect(await accepts(port)).toBe(false);
  });
});
