import { describe, expect, it } from "vitest";
import { prefixBlockHashes, renderChatForPrefix } from "./prefix-blocks.js";

describe("prefixBlockHashes", () => {
  it("hashes whole blocks only, chained: a shared prefix shares exactly its blocks", () => {
    const a = prefixBlockHashes("x".repeat(64) + "y".repeat(64) + "tail", 64, 100);
    const b = prefixBlockHashes("x".repeat(64) + "z".repeat(64), 64, 100);
    expect(a).toHaveLength(2);
    expect(b).toHaveLength(2);
    expect(a[0]).toBe(b[0]);
    expect(a[1]).not.toBe(b[1]);
    // The same block after a different prefix hashes differently (chained).
    const c = prefixBlockHashes("z".repeat(64) + "y".repeat(64), 64, 100);
    expect(c[1]).not.toBe(a[1]);
    expect(Number.isSafeInteger(a[0])).toBe(true);
  });

  it("stops at maxBlocks and refuses a block size below 1", () => {
    expect(prefixBlockHashes("a".repeat(1000), 10, 7)).toHaveLength(7);
    expect(prefixBlockHashes("short", 64, 10)).toHaveLength(0);
    expect(() => prefixBlockHashes("a", 0, 1)).toThrow(RangeError);
  });

  it("a conversation's next turn extends the rendering of the previous one", () => {
    const turn1 = [{ role: "system", content: "be brief" }, { role: "user", content: "hi" }];
    const turn2 = [...turn1, { role: "assistant", content: "hello" }, { role: "user", content: "more" }];
    expect(renderChatForPrefix(turn2).startsWith(renderChatForPrefix(turn1))).toBe(true);
  });
});
