import { mkdtemp, rm, truncate, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code } from "@warden/common";
import { readTokenTable } from "./coordinator-auth.js";
import { mintToken, tokenFileLimits, tokenLine } from "./token-table.js";

describe("readTokenTable", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "warden-read-tokens-"));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("refuses a file past the byte bound from its size, naming the field, the bound and the size", async () => {
    const path = join(dir, "huge");
    // Sparse: its size alone is past the bound.
    await writeFile(path, "");
    await truncate(path, tokenFileLimits.maxBytes + 1);
    await expect(readTokenTable(path)).rejects.toMatchObject({ code: Code.InvalidArgument, rawMessage: `auth.tokensFile: at most ${String(tokenFileLimits.maxBytes)} bytes, ${path} has ${String(tokenFileLimits.maxBytes + 1)}` });
  });

  it("reads a file of more lines than one parse step (the steps between turns of the event loop) whole", async () => {
    const tokens = Array.from({ length: 5_000 }, () => mintToken());
    const path = join(dir, "tokens");
    await writeFile(path, `${tokens.map((t, i) => tokenLine(t, "node", { node: `gpu-${String(i)}` })).join("\n")}\n`);
    const table = await readTokenTable(path);
    expect(table.size).toBe(5_000);
    expect(tokens.map((t) => table.lookup(t)?.nodeId).filter((n, i) => n !== `gpu-${String(i)}`)).toEqual([]);
  });

  it("names the file it cannot read", async () => {
    await expect(readTokenTable(join(dir, "absent"), "f")).rejects.toMatchObject({ code: Code.InvalidArgument, rawMessage: `f: cannot read ${join(dir, "absent")}: ENOENT` });
  });
});
