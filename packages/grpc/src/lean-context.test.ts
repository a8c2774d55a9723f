import type { IncomingHttpHeaders, ServerHttp2Session } from "node:http2";
import { describe, expect, it } from "vitest";
import { CallSignal } from "@warden/common";
import { LeanContext } from "./lean-context.js";

const contextOf = (headers: IncomingHttpHeaders): LeanContext => new LeanContext(new CallSignal(), headers, undefined as unknown as ServerHttp2Session, undefined);

describe("LeanContext.firstMetadataValue", () => {
  it.each<[string, IncomingHttpHeaders, string]>([
    ["a plain value", { "warden-priority": "batch" }, "warden-priority"],
    ["an absent key", { "other-key": "x" }, "warden-priority"],
    ["the first of repeated values", { "warden-priority": ["batch", "critical"] }, "warden-priority"],
    ["a value joined with a comma (one value)", { "warden-priority": "batch, critical" }, "warden-priority"],
    ["an empty value", { "warden-priority": "" }, "warden-priority"],
    ["a value that is not printable ASCII (Metadata drops the key)", { "warden-priority": "bätch" }, "warden-priority"],
    ["a binary key (Metadata holds bytes, not text)", { "x-bin": "AAEC" }, "x-bin"],
    ["a pseudo-header (not metadata)", { ":path": "/a.B/C" }, ":path"],
  ])("reads %s as metadata.get(key)[0] does, before and after metadata is built", (_what, headers, key) => {
    const fromMetadata = contextOf(headers).metadata.get(key)[0];
    const expected = typeof fromMetadata === "string" ? fromMetadata : undefined;
    expect(contextOf(headers).firstMetadataValue(key)).toBe(expected);
    const built = contextOf(headers);
    expect(built.metadata.get(key).length).toBeGreaterThanOrEqual(0);
    expect(built.firstMetadataValue(key)).toBe(expected);
  });
});
