import { afterEach, describe, expect, it } from "vitest";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { nkeys, type Authenticator } from "@nats-io/transport-node";
import { natsConnectOptions } from "./nats-connection.js";

let dir: string | undefined;
afterEach(async () => {
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

function credsFile(jwt: string, seed: string): string {
  return `-----BEGIN NATS USER JWT-----\n${jwt}\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\n${seed}\n------END USER NKEY SEED------\n`;
}

describe("natsConnectOptions", () => {
  it("reconnects forever and maps user/password and token", () => {
    const base = natsConnectOptions({ servers: "nats://h:4222" });
    expect(base).toMatchObject({ servers: ["nats://h:4222"], maxReconnectAttempts: -1, noAsyncTraces: true, waitOnFirstConnect: false });
    expect(natsConnectOptions({ servers: ["a", "b"], credentials: { kind: "user-password", user: "u", password: "p" } })).toMatchObject({
      servers: ["a", "b"],
      user: "u",
      pass: "p",
    });
    expect(natsConnectOptions({ servers: "a", credentials: { kind: "token", token: "t" }, inboxPrefix: "_INBOX_x" })).toMatchObject({
      token: "t",
      inboxPrefix: "_INBOX_x",
    });
  });

  it("splits a comma-separated server string (nats.js would dial only its last URL)", () => {
    expect(natsConnectOptions({ servers: "nats://a:1, nats://b:2,nats://c:3" }).servers).toEqual(["nats://a:1", "nats://b:2", "nats://c:3"]);
    expect(natsConnectOptions({ servers: ["nats://a:1,nats://b:2", "nats://c:3"] }).servers).toEqual(["nats://a:1", "nats://b:2", "nats://c:3"]);
    expect(() => natsConnectOptions({ servers: " , " })).toThrow(/servers/);
  });

  it("rejects empty server lists and empty secrets", () => {
    expect(() => natsConnectOptions({ servers: [] })).toThrow(/invalid_argument/);
    expect(() => natsConnectOptions({ servers: "a", credentials: { kind: "token", token: "" } })).toThrow(/token/);
    expect(() => natsConnectOptions({ servers: "a", credentials: { kind: "user-password", user: "", password: "x" } })).toThrow(/user/);
  });

  it("fails fast on a missing creds file, and re-reads it on every (re)connect so rotation needs no restart", async () => {
    expect(() => natsConnectOptions({ servers: "a", credentials: { kind: "creds-file", path: "/nonexistent/x.creds" } })).toThrow();
    dir = await mkdtemp(join(tmpdir(), "warden-creds-"));
    const path = join(dir, "user.creds");
    const seed = new TextDecoder().decode(nkeys.createUser().getSeed());
    await writeFile(path, credsFile("eyJ0eXAiOiJKV1QifQ.first.sig", seed));
    const opts = natsConnectOptions({ servers: "a", credentials: { kind: "creds-file", path } });
    const auth = opts.authenticator as Authenticator;
    const nonce = "nonce-123";
    expect(auth(nonce)).toMatchObject({ jwt: "eyJ0eXAiOiJKV1QifQ.first.sig" });
    await writeFile(path, credsFile("eyJ0eXAiOiJKV1QifQ.second.sig", seed));
    expect(auth(nonce)).toMatchObject({ jwt: "eyJ0eXAiOiJKV1QifQ.second.sig" });
  });
});
