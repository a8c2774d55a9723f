import { describe, expect, it } from "vitest";
import fc from "fast-check";
import type { StopIntent } from "./journal-record.js";
import { StopIntentIndex } from "./stop-intent-index.js";

const intent = (incarnation: string, nodeId: string): StopIntent => ({ incarnation, nodeId, model: "m", address: "a:1", reason: "lru", recordedAtMs: 1 });

describe("StopIntentIndex", () => {
  it("answers by node and by incarnation, and moves an intent re-recorded on another node", () => {
    const ix = new StopIntentIndex();
    ix.set("i1", intent("i1", "n1"));
    ix.set("i2", intent("i2", "n1"));
    ix.set("i3", intent("i3", "n2"));
    expect([...ix.onNode("n1")].sort()).toEqual(["i1", "i2"]);
    ix.set("i2", intent("i2", "n2"));
    expect([...ix.onNode("n1")]).toEqual(["i1"]);
    expect([...ix.onNode("n2")].sort()).toEqual(["i2", "i3"]);
    ix.delete("i1");
    expect(ix.onNode("n1").size).toBe(0);
    expect(ix.has("i1")).toBe(false);
    expect(ix.size).toBe(2);
  });

  it("agrees with a scan of every intent after any sequence of sets and deletes", () => {
    const op = fc.oneof(fc.record({ t: fc.constant("set" as const), inc: fc.integer({ min: 0, max: 6 }), node: fc.integer({ min: 0, max: 3 }) }), fc.record({ t: fc.constant("delete" as const), inc: fc.integer({ min: 0, max: 6 }) }));
    fc.assert(
      fc.property(fc.array(op, { maxLength: 60 }), (ops) => {
        const ix = new StopIntentIndex();
        for (const o of ops) {
          if (o.t === "set") ix.set(`i${String(o.inc)}`, intent(`i${String(o.inc)}`, `n${String(o.node)}`));
          else ix.delete(`i${String(o.inc)}`);
        }
        for (let n = 0; n < 4; n++) {
          const scan = [...ix.values()].filter((i) => i.nodeId === `n${String(n)}`).map((i) => i.incarnation).sort();
          expect([...ix.onNode(`n${String(n)}`)].sort()).toEqual(scan);
        }
      }),
    );
  });
});
