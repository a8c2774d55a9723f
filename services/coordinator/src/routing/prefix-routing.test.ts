import { describe, expect, it } from "vitest";
import { modelSpec, type ModelSpec } from "@warden/loader";
import { create } from "@bufbuild/protobuf";
import { EventSchema } from "@warden/proto";
import { PrefixRouting, promptText } from "./prefix-routing.js";

function routingFor(specs: ModelSpec[], nowMs: { t: number }): PrefixRouting {
  const byId = new Map(specs.map((s) => [s.id, s]));
  return new PrefixRouting({ modelSpec: (id: string) => byId.get(id) }, { now: () => nowMs.t }, { maxEntries: 1_000, maxEntriesPerReplica: 100, ttlMs: 60_000 });
}

const system = "You are a careful assistant. ".repeat(10);
const cands = [{ incarnation: "r1", inFlight: 0 }, { incarnation: "r2", inFlight: 0 }, { incarnation: "r3", inFlight: 0 }];

describe("PrefixRouting", () => {
  it("leaves a least-in-flight model alone: no hint, the prompt not even read", () => {
    const p = routingFor([modelSpec({ id: "m", backend: "sim" })], { t: 0 });
    expect(p.hint("m", () => { throw new Error("read"); })).toBeUndefined();
    expect(p.hint("unknown", () => ({ Prompt: system }))).toBeUndefined();
  });

  it("sends a prompt sharing a prefix to the replica that was sent it, until its load passes the margin", () => {
    const now = { t: 0 };
    const p = routingFor([modelSpec({ id: "m", backend: "sim", routing: { mode: "prefix", balanceMarginCalls: 1 } })], now);
    const first = p.hint("m", () => ({ Prompt: `${system}question one` }));
    expect(first?.prefer(cands, "r1")).toBe("r1");
    first?.routed("r2");
    const second = p.hint("m", () => ({ Prompt: `${system}question two` }));
    expect(second?.prefer(cands, "r1")).toBe("r2");
    // r2 two calls above the least loaded: past the margin of 1.
    expect(second?.prefer([{ incarnation: "r1", inFlight: 0 }, { incarnation: "r2", inFlight: 2 }], "r1")).toBe("r1");
    // Forgotten when it stops.
    p.follow({ observe: (fn) => { fn(create(EventSchema, { incarnation: "r2", payload: { case: "evictionStarted", value: {} } })); } });
    expect(p.size.entries).toBe(0);
    expect(second?.prefer(cands, "r3")).toBe("r3");
  });

  it("expires what a replica was sent after the TTL", () => {
    const now = { t: 0 };
    const p = routingFor([modelSpec({ id: "m", backend: "sim", routing: { mode: "prefix", balanceMarginCalls: 2 } })], now);
    p.hint("m", () => ({ Prompt: system }))?.routed("r3");
    now.t = 59_999;
    expect(p.hint("m", () => ({ Prompt: system }))?.prefer(cands, "r1")).toBe("r3");
    now.t = 60_000;
    expect(p.hint("m", () => ({ Prompt: system }))?.prefer(cands, "r1")).toBe("r1");
  });

  it("reads the Prompt, else the messages in order; a prompt shorter than a block gives no hint", () => {
    expect(promptText({ Prompt: "p", Messages: [{ role: "user", content: "x" }] })).toBe("p");
    expect(promptText({ Messages: [{ role: "user", content: "x" }] })).toBe("<|user|>\nx\n");
    const p = routingFor([modelSpec({ id: "m", backend: "sim", routing: { mode: "prefix", balanceMarginCalls: 2 } })], { t: 0 });
    expect(p.hint("m", () => ({ Prompt: "short" }))).toBeUndefined();
  });
});
