/**
 * Every relative link in the repository's Markdown reaches a file that exists,
 * and every `#anchor` a heading of its target (GitHub's slugs): docs moved
 * between files must take their links with them.
 */
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, normalize, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const root = resolve(import.meta.dirname, "..");
const markdown = execFileSync("git", ["ls-files", "--cached", "--others", "--exclude-standard", "*.md"], { cwd: root, encoding: "utf8" })
  .split("\n")
  .filter((f) => f !== "" && existsSync(join(root, f)));

/** The text outside fenced code blocks. */
function prose(path: string): string {
  return readFileSync(join(root, path), "utf8").replace(/```[\s\S]*?```/g, "");
}

/** GitHub's heading anchors of a Markdown file (duplicates numbered -1, -2, …). */
function anchorsOf(path: string): Set<string> {
  const seen = new Set<string>();
  for (const m of prose(path).matchAll(/^#+ (.*)$/gm)) {
    const base = (m[1] ?? "").trim().toLowerCase().replace(/[^\p{L}\p{N}_\- ]/gu, "").replace(/ /g, "-");
    let a = base;
    for (let i = 1; seen.has(a); i++) a = `${base}-${String(i)}`;
    seen.add(a);
  }
  return seen;
}

describe("documentation links", () => {
  it("finds the Markdown files", () => {
    expect(markdown).toContain("README.md");
  });

  it("every relative link and anchor resolves", () => {
    const broken: string[] = [];
    for (const file of markdown) {
      for (const m of prose(file).matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = m[1] ?? "";
        if (/^(https?|mailto):/.test(target)) continue;
        const [path = "", anchor] = target.split("#");
        const resolved = path === "" ? file : normalize(join(dirname(file), path));
        if (!existsSync(join(root, resolved))) broken.push(`${file}: ${target} (no such file)`);
        else if (anchor !== undefined && resolved.endsWith(".md") && !anchorsOf(resolved).has(anchor)) broken.push(`${file}: ${target} (no such heading)`);
      }
    }
    expect(broken).toEqual([]);
  });
});
