import { describe, expect, it } from "vitest";
import { Code } from "@warden/common";
import { TokenTable, hashToken, mintToken, tokenLine } from "./token-table.js";

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
    [`\n${"sha256:" + "0".repeat(64)} admin\n${"sha256:" + "0".repeat(64)} viewer`, "f:3: the same token hash appears twice"],
  ])("refuses the whole file on a bad line: %j", (text, message) => {
    expect(() => TokenTable.parse(text, "f")).toThrow(expect.objectContaining({ code: Code.InvalidArgument, rawMessage: expect.stringContaining(message) as unknown }));
  });
});
