import { describe, expect, it } from "vitest";
import { Code } from "@warden/common";
import { TokenTable, hashToken, mintToken, tokenFileLimits, tokenLine } from "./token-table.js";

describe("TokenTable", () => {
  it("finds a minted token by its line's hash, with its role, node and models; an unknown or altered token finds nothing", () => {
    const [a, n, i] = [mintToken(), mintToken(), mintToken()];
    const t = TokenTable.parse([`# comment`, "", tokenLine(a, "admin", { name: "alice" }), tokenLine(n, "node", { node: "gpu-1" }), `${tokenLine(i, "inference", { models: ["llama", "whisper"] })}  # trailing comment`].join("\n"), "f");
    expect(t.size).toBe(3);
    expect(t.lookup(a)).toEqual({ role: "admin", name: "alice" });
    expect(t.lookup(n)).toMatchObject({ role: "node", nodeId: "gpu-1", name: hashToken(n).slice(0, 15) });
    expect([...(t.lookup(i)?.models ?? [])]).toEqual(["llama", "whisper"]);
    expect(t.lookup(mintToken())).toBeUndefined();
    expect(t.lookup(`${a}x`)).toBeUndefined();
    expect(t.lookup("")).toBeUndefined();
  });

  it("stores a hash, never the token: the line does not contain it", () => {
    const a = mintToken();
    expect(a).toMatch(/^wdn_[A-Za-z0-9_-]{43}$/);
    expect(tokenLine(a, "viewer")).not.toContain(a.slice(4));
    expect(tokenLine(a, "viewer")).toMatch(/^sha256:[0-9a-f]{64} viewer$/);
  });

  it.each([
    ["wdn_abc admin", "f:1: must start with sha256:"],
    [`${"sha256:" + "0".repeat(64)} root`, "f:1: role must be one of"],
    [`${"sha256:" + "0".repeat(64)} node`, "f:1: a node token needs node="],
    [`${"sha256:" + "0".repeat(64)} admin node=x`, "f:1: node= is for node tokens only"],
    [`${"sha256:" + "0".repeat(64)} viewer models=a`, "f:1: models= is for inference tokens only"],
    [`${"sha256:" + "0".repeat(64)} node node=-bad`, "f:1: node="],
    [`${"sha256:" + "0".repeat(64)} admin color=red`, "f:1: expected node=, models=, priority= or name="],
    [`${"sha256:" + "0".repeat(64)} inference models=a priority=critical name=b node=c extra=1 more=2`, 'f:1: expected node=, models=, priority= or name= once each, got "extra=1"'],
    [`\n${"sha256:" + "0".repeat(64)} admin\n${"sha256:" + "0".repeat(64)} viewer`, "f:3: the same token hash appears twice"],
  ])("refuses the whole file on a bad line: %j", (text, message) => {
    expect(() => TokenTable.parse(text, "f")).toThrow(expect.objectContaining({ code: Code.InvalidArgument, rawMessage: expect.stringContaining(message) as unknown }));
  });

  it("holds 65 536 tokens of the longest node-token form (one per node of a 10 000-node coordinator and more); a 65 537th is refused naming the field and the bound", () => {
    expect(tokenFileLimits.maxEntries).toBe(65_536);
    // 128-character node ids and 64-character names: 281 bytes a line, 18 MB in all, within the byte bound.
    const lines = Array.from({ length: 65_537 }, (_, i) => `sha256:${i.toString(16).padStart(64, "0")} node node=n${String(i).padStart(127, "0")} name=k${String(i).padStart(63, "0")}`);
    const full = `${lines.slice(0, 65_536).join("\n")}\n`;
    expect(Buffer.byteLength(full)).toBeLessThanOrEqual(tokenFileLimits.maxBytes);
    const t = TokenTable.parse(full, "f");
    expect(t.size).toBe(65_536);
    expect(t.lookupDigest((65_535).toString(16).padStart(64, "0"))).toMatchObject({ role: "node", nodeId: `n${String(65_535).padStart(127, "0")}` });
    expect(() => TokenTable.parse(`${lines.join("\n")}\n`, "f")).toThrow(expect.objectContaining({ code: Code.InvalidArgument, rawMessage: "f: at most 65536 tokens" }));
  });

  it("parses in steps: a stop once the text is split, then after every `linesPerStep` lines; the table comes at the end, and a bad line after a stop refuses the whole file", () => {
    const good = Array.from({ length: 5 }, () => tokenLine(mintToken(), "viewer"));
    const run = (text: string): { stops: number; table: TokenTable } => {
      const steps = TokenTable.parseSteps(text, "f", 2);
      let stops = 0;
      for (;;) {
        const r = steps.next();
        if (r.done === true) return { stops, table: r.value };
        stops++;
      }
    };
    // Lines 1..5: stops before lines 1, 3 and 5.
    const r = run(good.join("\n"));
    expect([r.stops, r.table.size]).toEqual([3, 5]);
    expect(() => run([...good, "sha256:bad viewer"].join("\n"))).toThrow(expect.objectContaining({ rawMessage: expect.stringContaining("f:6: must start with sha256:") as unknown }));
  });
});
