import { dirname, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

/** Set by the CLI build (esbuild `define`): the client bundled at build time. Absent when run from source. */
declare const WARDEN_DASHBOARD_CLIENT: string | undefined;

interface ClientBuilder {
  buildDashboardClient(esbuild: unknown, root: string): Promise<{ code: string; inputs: string[] }>;
}

let fromSource: Promise<string> | undefined;

/**
 * The browser client's script. The built `warden` carries it (bundled with
 * the CLI, so an installed package needs no build tool); a coordinator run
 * from source (tests, `tsx`) bundles it once, at first use, with the
 * repository's esbuild. Either way it comes from client/ as it is now.
 */
export function dashboardClientBundle(): Promise<string> {
  if (typeof WARDEN_DASHBOARD_CLIENT === "string") return Promise.resolve(WARDEN_DASHBOARD_CLIENT);
  fromSource ??= (async () => {
    const here = dirname(fileURLToPath(import.meta.url));
    // Specifiers computed at run time, so the CLI's bundler leaves both alone (the built CLI never reaches here).
    const builderPath = resolve(here, "client", "build-client.mjs");
    const esbuildName = ["es", "build"].join("");
    const [builder, esbuild] = await Promise.all([import(pathToFileURL(builderPath).href) as Promise<ClientBuilder>, import(esbuildName) as Promise<unknown>]);
    return (await builder.buildDashboardClient(esbuild, resolve(here, "..", "..", "..", "..", ".."))).code;
  })();
  return fromSource;
}
