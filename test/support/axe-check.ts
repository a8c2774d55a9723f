/**
 * axe-core in the page under test (the dashboard's own page, its CSP on):
 * the engine is evaluated through the browser's debugging protocol, which
 * CSP does not govern, and nothing is fetched from elsewhere.
 */
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import type { Page } from "playwright-core";

const require = createRequire(import.meta.url);
let source: Promise<string> | undefined;

export interface AxeViolation {
  readonly id: string;
  readonly impact: string;
  readonly help: string;
  readonly targets: string[];
}

/** The serious and critical accessibility violations axe finds on what the page shows now. */
export async function seriousAxeViolations(page: Page): Promise<AxeViolation[]> {
  source ??= readFile(require.resolve("axe-core/axe.min.js"), "utf8");
  const code = await source;
  await page.evaluate(code);
  // A string, run in the page: this file is compiled without the DOM's types.
  const found = await page.evaluate<AxeViolation[]>(`axe.run(document, { resultTypes: ["violations"] }).then((r) => r.violations.map((v) => ({ id: v.id, impact: v.impact ?? "", help: v.help, targets: v.nodes.map((n) => JSON.stringify(n.target)) })))`);
  return found.filter((v) => v.impact === "serious" || v.impact === "critical");
}
