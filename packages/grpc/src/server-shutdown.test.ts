import { describe, expect, it } from "vitest";
import { Code, WardenError, isWardenError } from "@warden/common";
import { Backend } from "@warden/proto";
import { GrpcServer, createClient, withUnimplemented } from "./index.js";

// A call still open when a shutdown's grace ends (a coordinator closing, or an
// HA leader stepping down) may succeed elsewhere: its client must read
// UNAVAILABLE (retry, follow the leader), not the CANCELLED that grpc-js's
// forceShutdown alone produces and that no caller asked for.
describe("GrpcServer.shutdown: calls cut after the grace", () => {
  it("end UNAVAILABLE, not CANCELLED, and the outcome says forced", async () => {
    const server = new GrpcServer();
    let entered: () => void = () => {};
    const inHandler = new Promise<void>((r) => (entered = r));
    server.add(Backend, withUnimplemented(Backend, {
      async predict(_req, ctx) {
        entered();
        await new Promise<void>((resolve) => {
          ctx.signal.addEventListener("abort", () => { resolve(); }, { once: true });
        });
        throw WardenError.from(ctx.signal.reason);
      },
    }));
    const { address } = await server.listen("127.0.0.1:0");
    const client = createClient(Backend, address);
    try {
      const call = client.predict({ Prompt: "hang" }, { timeoutMs: 60_000 }).then(() => undefined, (err: unknown) => err);
      await inHandler;
      expect(await server.shutdown(50)).toBe("forced");
      const err = await call;
      expect(isWardenError(err, Code.Unavailable)).toBe(true);
      expect((err as WardenError).message).toContain("server shutting down");
    } finally {
      client.close();
    }
  });
});
