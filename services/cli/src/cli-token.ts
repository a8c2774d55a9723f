import { readSecretFile } from "@warden/common";

/**
 * The bearer token an admin command sends: `--token-file` (the whole file,
 * trimmed) wins over WARDEN_TOKEN; undefined = none (auth off). The token is
 * never printed, echoed in an error, or written to `--json` output.
 */
export function cliToken(tokenFile: string | undefined, env: Readonly<Record<string, string | undefined>>): string | undefined {
  if (tokenFile !== undefined) return readSecretFile(tokenFile, "--token-file");
  const t = env.WARDEN_TOKEN?.trim();
  return t === undefined || t === "" ? undefined : t;
}
