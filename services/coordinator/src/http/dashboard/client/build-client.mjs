// @ts-check
/**
 * Bundles the dashboard's browser client (client/dashboard-client.ts and what
 * it imports) into one script, in memory. Used by the CLI build
 * (services/cli/build/build.mjs), which embeds the result in dist/, and by a
 * coordinator run from source (dashboard-client-bundle.ts), so both serve the
 * same bundle from the same source and no built file is ever committed.
 */
import { relative } from "node:path";
import { URL, fileURLToPath } from "node:url";

/** The client's entry point. */
export const clientEntry = fileURLToPath(new URL("./dashboard-client.ts", import.meta.url));

/**
 * @param {typeof import("esbuild")} esbuild
 * @param {string} root paths in `inputs` are relative to it
 * @returns {Promise<{ code: string; inputs: string[] }>}
 */
export async function buildDashboardClient(esbuild, root) {
  const r = await esbuild.build({
    entryPoints: [clientEntry],
    absWorkingDir: root,
    bundle: true,
    write: false,
    format: "iife",
    platform: "browser",
    target: "es2020",
    minify: true,
    metafile: true,
    logLevel: "warning",
  });
  const out = r.outputFiles[0];
  if (out === undefined) throw new Error("dashboard client: esbuild wrote no file");
  return { code: out.text, inputs: Object.keys(r.metafile.inputs).map((p) => relative(root, `${root}/${p}`)) };
}
