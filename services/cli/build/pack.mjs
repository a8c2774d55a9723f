// @ts-check
/**
 * `npm run pack:warden [-- --out DIR]`: one installable tarball,
 * warden-<version>.tgz, for putting an agent (or a coordinator) on a node
 * without the repository. It holds the bin, the bundle (every npm dependency
 * is inside it, so the package declares none and installs offline), source
 * maps, the bundled packages' licenses and the example systemd units:
 *
 *   npm install -g ./warden-0.1.0.tgz
 *   warden agent --config /etc/warden/agent.yaml --coordinator HOST:PORT
 */
import { execFileSync } from "node:child_process";
import { copyFile, mkdir, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import process from "node:process";
import { distDir, repoRoot } from "./build.mjs";
import { ensureFreshBuild } from "./fresh.mjs";

/** Units shipped in the tarball's deploy/ directory (each kept beside its service). */
const units = [
  ["services/coordinator/deploy/warden-coordinator.service", "warden-coordinator.service"],
  ["services/coordinator/deploy/coordinator.example.yaml", "coordinator.example.yaml"],
  ["services/agent/deploy/warden-agent.service", "warden-agent.service"],
  ["services/agent/deploy/agent.example.yaml", "agent.example.yaml"],
];

/**
 * Builds (if stale) and packs; returns the tarball's absolute path.
 * @param {string} outDir
 * @returns {Promise<string>}
 */
export async function packWarden(outDir) {
  await ensureFreshBuild({ quiet: true });
  const cliPkg = JSON.parse(await readFile(join(repoRoot, "services", "cli", "package.json"), "utf8"));
  const rootPkg = JSON.parse(await readFile(join(repoRoot, "package.json"), "utf8"));
  const stage = await mkdtemp(join(tmpdir(), "warden-pack-"));
  try {
    await mkdir(join(stage, "bin"));
    await mkdir(join(stage, "dist"));
    await mkdir(join(stage, "deploy"));
    // The same bin as in the checkout: without ../build it goes straight to the bundle.
    await copyFile(join(repoRoot, "services", "cli", "bin", "warden.js"), join(stage, "bin", "warden.js"));
    for (const f of await readdir(distDir)) {
      // A code cache is keyed to this checkout's file (see bin/warden.js): an install makes its own.
      if (f === "build-stamp.json" || f.endsWith(".tmp") || f.endsWith(".v8cache")) continue;
      await copyFile(join(distDir, f), join(stage, "dist", f));
    }
    for (const [from, to] of units) await copyFile(join(repoRoot, from), join(stage, "deploy", to));
    await writeFile(
      join(stage, "README.md"),
      `# warden ${String(cliPkg.version)}\n\nThe Warden coordinator, node agent and CLI, bundled (no dependencies to install).\n\n` +
        "```sh\nnpm install -g ./warden-" + String(cliPkg.version) + ".tgz\nwarden --version\nsudo warden install coordinator --san COORDINATOR_HOST          # on the coordinator's machine\nsudo warden install agent --coordinator COORDINATOR_HOST:50051  # on each GPU node\n```\n\n" +
        "`warden install --help` says what it creates (service user, /etc/warden, certificates, systemd unit). Reference units and configs: `deploy/` in this package.\n",
    );
    const pkg = {
      name: "warden",
      version: cliPkg.version,
      description: rootPkg.description,
      type: "module",
      bin: { warden: "bin/warden.js" },
      engines: rootPkg.engines,
      files: ["bin", "dist", "deploy", "README.md"],
    };
    await writeFile(join(stage, "package.json"), `${JSON.stringify(pkg, null, 2)}\n`);
    await mkdir(outDir, { recursive: true });
    const npm = process.platform === "win32" ? "npm.cmd" : "npm";
    const out = execFileSync(npm, ["pack", stage, "--pack-destination", outDir, "--json", "--ignore-scripts"], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    const name = /** @type {{ filename: string }[]} */ (JSON.parse(out))[0]?.filename;
    if (name === undefined) throw new Error(`npm pack printed no file name: ${out}`);
    return join(outDir, name);
  } finally {
    await rm(stage, { recursive: true, force: true });
  }
}

if (process.argv[1] !== undefined && process.argv[1].endsWith("pack.mjs")) {
  const i = process.argv.indexOf("--out");
  const outDir = resolve(i >= 0 ? (process.argv[i + 1] ?? ".") : repoRoot);
  process.stdout.write(`${await packWarden(outDir)}\n`);
}
