/**
 * The tokens file's entry bound on a real coordinator process: one node
 * token per node for a coordinator of 10 000 nodes and more. A file of
 * 65 536 entries in their longest node-token form (128-character node ids,
 * 64-character names) is read at start and on SIGHUP; one of 65 537 is
 * refused by the reload, naming the field and the bound, and the running
 * table stays: its tokens still work, the refused file's new one does not.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, WardenError } from "@warden/common";
import { createClient } from "@warden/grpc";
import { AdminService } from "@warden/proto";
import { mintToken, tokenLine } from "@warden/coordinator";
import { startCoordinatorProcess, type CoordinatorProcess } from "./support/coordinator-process.js";
import { withToken } from "./support/auth-tokens.js";
import { until } from "./support/coordinator-harness.js";

/** Generous: a loaded 2-core machine. Conditions are awaited, never timed. */
const waitMs = 60_000;


/** `count` node-token lines of the longest form a node token takes; hashes of tokens nobody holds. */
function nodeLines(count: number): string[] {
  return Array.from({ length: count }, (_, i) => `sha256:${i.toString(16).padStart(64, "0")} node node=n${String(i).padStart(127, "0")} name=k${String(i).padStart(63, "0")}`);
}

describe("tokens file bound", () => {
  let dir: string;
  let coord: CoordinatorProcess;
  let tokensFile: string;
  const admin = mintToken();
  const late = mintToken();
  /** The documented bound (deployment-and-security.md). */
  const max = 65_536;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "warden-token-bound-"));
    tokensFile = join(dir, "tokens");
    await writeFile(tokensFile, `${[tokenLine(admin, "admin", { name: "admin" }), ...nodeLines(max - 1)].join("\n")}\n`, { mode: 0o600 });
    coord = await startCoordinatorProcess(join(dir, "coordinator.yaml"), { listen: "127.0.0.1:0", stateDir: join(dir, "state"), embeddedAgent: false, recoveryWindow: "0s", auth: { tokensFile }, models: [] }, 120_000);
  }, 180_000);

  afterAll(async () => {
    // Unset when it did not start.
    await (coord as CoordinatorProcess | undefined)?.kill();
    await rm(dir, { recursive: true, force: true });
  });

  const call = async (token: string): Promise<Code> => {
    const c = createClient(AdminService, coord.address, withToken(token));
    try {
      await c.listNodes({}, { timeoutMs: waitMs });
      return Code.Ok;
    } catch (err) {
      return WardenError.from(err).code;
    } finally {
      c.close();
    }
  };
  const logged = (msg: string): Readonly<Record<string, unknown>>[] => coord.logLines.filter((l) => l.msg === msg);

  it("65 536 entries load at start and on reload; 65 537 are refused by a reload naming the field and the bound, and the running tokens stay", async () => {
    expect(logged("auth on").map((l) => l.tokens)).toEqual([max]);
    expect(await call(admin)).toBe(Code.Ok);

    // One more: the reload is refused whole and the table read at start stays in use.
    await writeFile(tokensFile, `${[tokenLine(admin, "admin", { name: "admin" }), tokenLine(late, "admin", { name: "late" }), ...nodeLines(max - 1)].join("\n")}\n`, { mode: 0o600 });
    coord.child.kill("SIGHUP");
    await until("the reload's outcome", () => logged("config reload rejected; keeping the running config").length > 0 || coord.child.exitCode !== null, waitMs);
    expect(coord.child.exitCode).toBeNull();
    expect(logged("config reload rejected; keeping the running config").map((l) => l.err)).toEqual([`[invalid_argument] auth.tokensFile: at most ${String(max)} tokens`]);
    expect([await call(admin), await call(late)]).toEqual([Code.Ok, Code.Unauthenticated]);

    // Back to 65 536 (one node line fewer): the reload applies, the new token works.
    await writeFile(tokensFile, `${[tokenLine(admin, "admin", { name: "admin" }), tokenLine(late, "admin", { name: "late" }), ...nodeLines(max - 2)].join("\n")}\n`, { mode: 0o600 });
    coord.child.kill("SIGHUP");
    await until("the second reload", () => logged("config reloaded").length > 0, waitMs);
    expect([await call(admin), await call(late)]).toEqual([Code.Ok, Code.Ok]);
  }, 240_000);
});
