import { describe, expect, it } from "vitest";
import { doneText, failedText, pendingText, type NodeAction } from "./node-action-text.js";

const all: NodeAction[] = [{ t: "load", model: "chat-a" }, { t: "unload", model: "chat-a" }, { t: "drain", nodeId: "gpu-a" }, { t: "undrain", nodeId: "gpu-a" }];

describe("node action words (the Nodes page's pending, done and refused lines)", () => {
  it("says what runs in words, never the request's JSON", () => {
    expect(all.map(pendingText)).toEqual(["loading chat-a…", "unloading chat-a…", "draining gpu-a…", "undraining gpu-a…"]);
    for (const a of all) {
      expect(pendingText(a)).not.toMatch(/[{}"]/);
      expect(doneText(a, {})).not.toMatch(/[{}"]/);
    }
  });

  it("an answer names where a load went, an unload's outcome and what a drain leaves", () => {
    expect(doneText({ t: "load", model: "chat-a" }, { instance: { nodeId: "gpu-a" } })).toBe("loaded chat-a on gpu-a");
    expect(doneText({ t: "unload", model: "chat-a" }, { outcome: "stopped" })).toBe("unloaded chat-a: stopped");
    expect(doneText({ t: "drain", nodeId: "gpu-a" }, { drainRemaining: 2 })).toBe("gpu-a is draining: takes no new loads, 2 instances to move off");
    expect(doneText({ t: "drain", nodeId: "gpu-a" }, { drainRemaining: 0 })).toBe("gpu-a is draining: takes no new loads, nothing left on it");
    expect(doneText({ t: "undrain", nodeId: "gpu-a" }, {})).toBe("gpu-a takes loads again");
    // A field of the wrong type is left out, not printed.
    expect(doneText({ t: "unload", model: "chat-a" }, { outcome: { x: 1 } })).toBe("unloaded chat-a");
  });

  it("a refusal names the action, its target and why; a load that did not happen failed", () => {
    expect(failedText({ t: "drain", nodeId: "gpu-a" }, "NOT_FOUND: no node gpu-a")).toBe("drain of gpu-a refused — NOT_FOUND: no node gpu-a");
    expect(failedText({ t: "load", model: "chat-a" }, "UNAVAILABLE: node is draining")).toBe("load of chat-a failed — UNAVAILABLE: node is draining");
    expect(failedText({ t: "undrain", nodeId: "gpu-a" }, "Failed to fetch", false)).toBe("undrain of gpu-a failed — Failed to fetch");
  });
});
