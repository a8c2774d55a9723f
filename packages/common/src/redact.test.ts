import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { createLogger } from "./logger.js";
import { redactFields, redactText } from "./redact.js";

function capture(): { stream: Writable; text: () => string } {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, cb) {
      chunks.push(chunk.toString("utf8"));
      cb();
    },
  });
  return { stream, text: () => chunks.join("") };
}

const token = "wdn_Zm9vYmFyYmF6cXV4cXV1eGNvcmdlZ3JhdWx0";

describe("log redaction", () => {
  it("secret fields at any depth, authorization metadata, bearer and Warden tokens inside strings (message, errors, bindings) never reach the line", () => {
    const { stream, text } = capture();
    const log = createLogger({ name: "t", destination: stream }).child({ component: "c", authToken: "bind-secret-1" });
    log.warn(`presented Bearer ${token} from 10.0.0.1`, {
      token: "plain-secret-2",
      nats: { url: "nats://x", pass: "plain-secret-3", user: "u", credsFile: "/etc/x.creds" },
      metadata: { authorization: "Bearer plain-secret-4" },
      headers: [{ "x-api-key": "plain-secret-5" }],
      password: "plain-secret-6",
      privateKey: "-----BEGIN PRIVATE KEY----- plain-secret-7",
      err: new Error(`call failed: authorization Bearer plain-secret-8`),
      detail: `see ${token}`,
      tokens: 3,
      backendToken: true,
    });
    const line = text();
    for (const s of [token, "bind-secret-1", "plain-secret-2", "plain-secret-3", "plain-secret-4", "plain-secret-5", "plain-secret-6", "plain-secret-7", "plain-secret-8"]) expect(line).not.toContain(s);
    const o = JSON.parse(line) as Record<string, unknown>;
    // What is not secret stays readable.
    expect(o).toMatchObject({ component: "c", tokens: 3, backendToken: true, nats: { url: "nats://x", user: "u", pass: "[redacted]" }, token: "[redacted]" });
    expect(o.msg).toBe("presented Bearer [redacted] from 10.0.0.1");
    expect(JSON.stringify(o.err)).toContain("call failed");
  });

  it("leaves text and fields without secrets as they are, and never changes its input", () => {
    expect(redactText("no secrets here")).toBe("no secrets here");
    const input = { nested: { password: "p" }, list: ["Bearer x"] };
    const out = redactFields(input);
    expect(out).toEqual({ nested: { password: "[redacted]" }, list: ["Bearer [redacted]"] });
    expect(input).toEqual({ nested: { password: "p" }, list: ["Bearer x"] });
  });
});
