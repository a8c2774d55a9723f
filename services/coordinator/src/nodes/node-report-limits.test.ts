import { create } from "@bufbuild/protobuf";
import { HeartbeatRequestSchema } from "@warden/proto";
import { describe, expect, it } from "vitest";
import { validateHeartbeat } from "./node-report-limits.js";

const beat = (states: { backend: string; installed?: boolean; pullBytes?: bigint; sizeKnown?: boolean }[]) => create(HeartbeatRequestSchema, { nodeId: "n1", bootEpoch: 1n, sequence: 1n, artifactCache: { freeBytes: 1n, bundles: { states } } });

describe("validateHeartbeat: artifact_cache.bundles", () => {
  it("accepts one state per catalog backend within the bounds", () => {
    expect(() => {
      validateHeartbeat(beat([{ backend: "llama", installed: true }, { backend: "vllm", pullBytes: BigInt(Number.MAX_SAFE_INTEGER), sizeKnown: true }]));
    }).not.toThrow();
  });

  it.each([
    [[{ backend: "bad name" }], "artifact_cache.bundles.states[0].backend"],
    [[{ backend: "llama" }, { backend: "llama" }], "artifact_cache.bundles.states[1].backend"],
    [[{ backend: "llama", pullBytes: BigInt(Number.MAX_SAFE_INTEGER) + 1n, sizeKnown: true }], "artifact_cache.bundles.states[0].pull_bytes"],
    [Array.from({ length: 257 }, (_, i) => ({ backend: `b${String(i)}` })), "artifact_cache.bundles.states"],
  ])("refuses %#, naming the field", (states, field) => {
    expect(() => {
      validateHeartbeat(beat(states));
    }).toThrow(field);
  });
});
