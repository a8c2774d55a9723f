import { describe, expect, it } from "vitest";
import { WardenError } from "@warden/common";
import { resolveAgentConfig } from "./agent-config.js";

const base = { nodeId: "n1", stateDir: "/tmp/x", ports: { min: 20000, max: 20010 }, catalog: { sim: { command: "/bin/true" } } };

function errorOf(extra: Record<string, unknown>): string {
  try {
    resolveAgentConfig({ ...base, ...extra });
  } catch (err) {
    return WardenError.from(err).rawMessage;
  }
  return "no error";
}

describe("artifactCacheBudget", () => {
  it("takes a size or bytes, at least 1 KiB; unset is no budget", () => {
    expect(resolveAgentConfig(base).artifactCacheBudgetBytes).toBeUndefined();
    expect(resolveAgentConfig({ ...base, artifactCacheBudget: "200GiB" }).artifactCacheBudgetBytes).toBe(200 * 1024 ** 3);
    expect(resolveAgentConfig({ ...base, artifactCacheBudget: 3_500_000 }).artifactCacheBudgetBytes).toBe(3_500_000);
    expect(errorOf({ artifactCacheBudget: "80%" })).toMatch(/^artifactCacheBudget: must be a size like "200GiB", at least 1KiB/);
    expect(errorOf({ artifactCacheBudget: 512 })).toMatch(/^artifactCacheBudget: /);
    expect(errorOf({ artifactCacheBudget: "lots" })).toMatch(/^artifactCacheBudget: /);
  });
});
