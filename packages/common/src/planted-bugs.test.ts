import { readFileSync, readdirSync, statSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import * as common from "@warden/common";
import { isPlanted, plantedBugNames } from "@warden/common";
import { plantBugs, plantedBugs } from "@warden/common/testing/planted-bugs";

const root = resolve(import.meta.dirname, "../../..");

function sources(dir: string, out: string[]): void {
  for (const e of readdirSync(dir)) {
    if (e === "node_modules" || e === "gen" || e.startsWith(".")) continue;
    const p = join(dir, e);
    if (statSync(p).isDirectory()) sources(p, out);
    else if (e.endsWith(".ts") && !e.endsWith(".test.ts")) out.push(p);
  }
}

/** Production code: every non-test source under packages/ and services/, the switch's own two files excepted. */
function productionSources(): string[] {
  const out: string[] = [];
  for (const top of ["packages", "services"]) {
    for (const pkg of readdirSync(join(root, top))) {
      const src = join(root, top, pkg, "src");
      try {
        if (statSync(src).isDirectory()) sources(src, out);
      } catch {
        // a package without src
      }
    }
  }
  const own = new Set([join(root, "packages/common/src/planted-bugs.ts"), join(root, "packages/common/src/testing/planted-bugs.ts")]);
  return out.filter((p) => !own.has(p));
}

describe("planted bugs switch", () => {
  let undo: (() => void) | undefined;
  afterEach(() => {
    undo?.();
    undo = undefined;
  });

  it("is off by default: nothing is planted", () => {
    expect(plantedBugs()).toEqual([]);
    for (const b of plantedBugNames) expect(isPlanted(b)).toBe(false);
  });

  it("plants exactly the named bugs and the undo restores the previous set", () => {
    undo = plantBugs(["forget-on-failed-stop"]);
    expect(isPlanted("forget-on-failed-stop")).toBe(true);
    expect(isPlanted("route-to-stopping")).toBe(false);
    const inner = plantBugs(["route-to-stopping"]);
    expect(plantedBugs()).toEqual(["route-to-stopping"]);
    inner();
    expect(plantedBugs()).toEqual(["forget-on-failed-stop"]);
  });

  it("refuses an unknown name, so a typo cannot silently plant nothing", () => {
    expect(() => plantBugs(["no-such-bug" as never])).toThrow(RangeError);
    expect(plantedBugs()).toEqual([]);
  });

  it("the production entry exports the check, never the setter", () => {
    expect(typeof common.isPlanted).toBe("function");
    expect("plantBugs" in common).toBe(false);
  });

  it("no production source under packages/ or services/ reaches the setter", () => {
    const offenders: string[] = [];
    for (const p of productionSources()) {
      const text = readFileSync(p, "utf8");
      if (/testing\/planted-bugs|plantBugs\s*\(|common\/src\/planted-bugs/.test(text)) offenders.push(relative(root, p));
    }
    expect(offenders).toEqual([]);
  });

  it("every planted bug is consulted somewhere in the decision code", () => {
    const consulted = new Set<string>();
    for (const p of productionSources()) {
      for (const m of readFileSync(p, "utf8").matchAll(/isPlanted\("([a-z-]+)"\)/g)) if (m[1] !== undefined) consulted.add(m[1]);
    }
    expect([...plantedBugNames].filter((b) => !consulted.has(b))).toEqual([]);
  });
});
