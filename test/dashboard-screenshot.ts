/**
 * `npm run screenshot`: regenerates services/coordinator/docs/dashboard.png
 * from the flow test/dashboard.test.ts checks (a grouped eviction, live).
 */
import { mkdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { groupedEvictionFlow, startDashboardRig } from "./support/dashboard-flow.js";

const out = join(dirname(fileURLToPath(import.meta.url)), "..", "services", "coordinator", "docs", "dashboard.png");
const rig = await startDashboardRig();
try {
  await groupedEvictionFlow(rig);
  await rig.page.selectOption("#explain-model", "chat-a");
  await rig.page.click("#explain-form button[type=submit]");
  await rig.page.waitForSelector('#explain [data-decision="evict-then-place"]', { timeout: 60_000 });
  await mkdir(dirname(out), { recursive: true });
  await rig.page.screenshot({ path: out, fullPage: true });
  process.stdout.write(`wrote ${out}\n`);
} finally {
  await rig.close();
}
