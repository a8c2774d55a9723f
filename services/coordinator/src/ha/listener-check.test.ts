import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { connect, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { checkListenersBindable, ephemeralPorts, portsInEphemeralRange } from "./listener-check.js";

const held: Server[] = [];
afterEach(async () => {
  await Promise.all(held.splice(0).map((s) => new Promise((r) => s.close(r))));
});

/** A listener on a free loopback port, held until the test ends; its host:port. */
async function hold(): Promise<string> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen({ host: "127.0.0.1", port: 0 }, resolve));
  held.push(s);
  const a = s.address();
  if (a === null || typeof a === "string") throw new Error("no TCP address");
  return `127.0.0.1:${String(a.port)}`;
}

describe("checkListenersBindable", () => {
  it("names each leader listener another process holds, with the bind error", async () => {
    const http = await hold();
    const inference = await hold();
    expect(await checkListenersBindable({ httpListen: http, inferenceListen: inference })).toEqual([
      { field: "httpListen", address: http, error: "EADDRINUSE" },
      { field: "inferenceListen", address: inference, error: "EADDRINUSE" },
    ]);
  });

  it("is empty when they can bind, when unset, for port 0, and for an address the standby itself serves", async () => {
    const http = await hold();
    const free = await hold();
    await new Promise((r) => held.pop()!.close(r)); // free again
    expect(await checkListenersBindable({ httpListen: free, inferenceListen: undefined })).toEqual([]);
    expect(await checkListenersBindable({ httpListen: undefined, inferenceListen: "127.0.0.1:0" })).toEqual([]);
    expect(await checkListenersBindable({ httpListen: http, inferenceListen: undefined }, [http])).toEqual([]);
  });
});

describe("ports in the ephemeral range", () => {
  it("an outgoing connection's local port cannot be listened on while it lives: why a member warns", async () => {
    const target = await hold();
    const sock: Socket = await new Promise((resolve, reject) => {
      const c = connect(Number(target.split(":")[1]), "127.0.0.1", () => {
        resolve(c);
      });
      c.once("error", reject);
    });
    try {
      const taken = `127.0.0.1:${String(sock.localPort)}`;
      expect(await checkListenersBindable({ httpListen: taken, inferenceListen: undefined })).toEqual([{ field: "httpListen", address: taken, error: "EADDRINUSE" }]);
    } finally {
      sock.destroy();
    }
  });

  it("names listen, httpListen and inferenceListen inside the range or on port 0; not those below it, above it or reserved", () => {
    const ports = { min: 32_768, max: 60_999, reserved: [] };
    expect(portsInEphemeralRange({ listen: "127.0.0.1:50051", httpListen: "0.0.0.0:8080", inferenceListen: "[::]:40000" }, ports)).toEqual(["listen 127.0.0.1:50051", "inferenceListen [::]:40000"]);
    expect(portsInEphemeralRange({ listen: "127.0.0.1:0", httpListen: undefined, inferenceListen: undefined }, ports)).toEqual(["listen 127.0.0.1:0"]);
    expect(portsInEphemeralRange({ listen: "127.0.0.1:32767", httpListen: "127.0.0.1:61000", inferenceListen: undefined }, ports)).toEqual([]);
    const reserved = { ...ports, reserved: [{ min: 50_051, max: 50_051 }, { min: 39_000, max: 41_000 }] };
    expect(portsInEphemeralRange({ listen: "127.0.0.1:50051", httpListen: undefined, inferenceListen: "[::]:40000" }, reserved)).toEqual([]);
  });

  it("reads the kernel's range and reserved ports; undefined for a missing or malformed range", async () => {
    const ok = await mkdtemp(join(tmpdir(), "warden-eph-"));
    const bad = await mkdtemp(join(tmpdir(), "warden-eph-"));
    try {
      await writeFile(join(ok, "ip_local_port_range"), "32768\t60999\n");
      await writeFile(join(ok, "ip_local_reserved_ports"), "8080,50051-50053\n");
      await writeFile(join(bad, "ip_local_port_range"), "lots\n");
      expect(await ephemeralPorts(ok)).toEqual({ min: 32_768, max: 60_999, reserved: [{ min: 8_080, max: 8_080 }, { min: 50_051, max: 50_053 }] });
      expect(await ephemeralPorts(bad)).toBeUndefined();
      expect(await ephemeralPorts(join(ok, "missing"))).toBeUndefined();
    } finally {
      await rm(ok, { recursive: true, force: true });
      await rm(bad, { recursive: true, force: true });
    }
  });
});
