import { isAbsolute } from "node:path";
import { invalidArgument } from "@warden/common";
import { checkBundle, type BundleSpec } from "./backend-bundle-config.js";
import { checkLocalaiEntry, launchProfiles, localaiCwd, type LaunchProfile } from "./launch-profile.js";
import { isRecord, rejectUnknown, str, stringList, stringMap } from "./config-fields.js";

/**
 * One catalog backend: the only place an executable and its base arguments come
 * from. Requests name a catalog entry; they never carry a command line.
 */
export interface CatalogEntry {
  /** Absolute path of the executable (no shell, no PATH lookup). */
  command: string;
  /** Base arguments; the agent appends `--addr host:port`. */
  args: readonly string[];
  /** Fixed environment values given to every process of this backend. */
  env: Readonly<Record<string, string>>;
  /**
   * Names of the agent's own environment variables passed through (an
   * allow-list; `PREFIX_*` matches a prefix). Everything else is withheld, so
   * e.g. LD_PRELOAD never leaks into a backend.
   */
  envAllow: readonly string[];
  /** Working directory; undefined = the agent's. Profile localai: the executable's directory unless set. */
  cwd: string | undefined;
  /**
   * The backend serves TLS: the agent's own calls to it (readiness, Health,
   * Free) verify its certificate against `ca`. The coordinator's side is its
   * `backendTls`. undefined = plaintext.
   */
  tls?: { readonly caFile: string; readonly serverName: string | undefined } | undefined;
  /** How processes are launched (launch-profile.ts). @default "plain" */
  profile: LaunchProfile;
  /** Installed from a bundle before its first start (backend-bundle.ts); `command` is then the bundle's run.sh. */
  bundle?: BundleSpec | undefined;
}

const envNamePattern = /^[A-Za-z_][A-Za-z0-9_]*\*?$/;
const catalogFields = new Set(["command", "args", "env", "envAllow", "cwd", "builtin", "tls", "profile", "bundle"]);

/** Built-in catalog entries selectable with `builtin: <name>`; filled by the caller to avoid an import cycle. */
export type BuiltinCatalog = Readonly<Record<string, () => CatalogEntry>>;

/**
 * Validates one `catalog.<name>` entry (`field` is its path), filling what it
 * leaves out from its builtin, its bundle or its profile. A bundle's command is
 * "/" here: resolveAgentConfig points it at the bundle's run.sh under modelsPath.
 */
export function catalogEntry(v: unknown, field: string, builtins: BuiltinCatalog): CatalogEntry {
  if (!isRecord(v)) throw invalidArgument(field, "must be a map with command, args, env, envAllow, cwd or builtin");
  rejectUnknown(v, catalogFields, field);
  let base: CatalogEntry | undefined;
  if (v.builtin !== undefined) {
    const name = str(v.builtin, `${field}.builtin`);
    const make = builtins[name];
    if (make === undefined) throw invalidArgument(`${field}.builtin`, `unknown builtin "${name}" (known: ${Object.keys(builtins).join(", ")})`);
    base = make();
  }
  const bundle = v.bundle === undefined ? undefined : checkBundle(`${field}.bundle`, v.bundle);
  if (bundle !== undefined && (v.command !== undefined || base !== undefined)) throw invalidArgument(`${field}.bundle`, "a bundle brings its own run.sh: no command or builtin beside it");
  // A bundle's run.sh lives under modelsPath, known once the whole config is read (resolveAgentConfig fills it in).
  const command = bundle !== undefined ? "/" : v.command === undefined && base !== undefined ? base.command : str(v.command, `${field}.command`);
  if (!isAbsolute(command)) throw invalidArgument(`${field}.command`, `must be an absolute path (no PATH lookup), got "${command}"`);
  const env = { ...base?.env, ...stringMap(v.env, `${field}.env`) };
  for (const k of Object.keys(env)) if (!envNamePattern.test(k) || k.endsWith("*")) throw invalidArgument(`${field}.env.${k}`, "invalid environment variable name");
  const envAllow = v.envAllow === undefined ? [...(base?.envAllow ?? [])] : stringList(v.envAllow, `${field}.envAllow`);
  envAllow.forEach((n, i) => {
    if (!envNamePattern.test(n)) throw invalidArgument(`${field}.envAllow[${String(i)}]`, `invalid name "${n}"`);
  });
  const profileName = v.profile === undefined ? (base?.profile ?? (bundle !== undefined ? "localai" : "plain")) : str(v.profile, `${field}.profile`);
  const profile = launchProfiles.find((p) => p === profileName);
  if (profile === undefined) throw invalidArgument(`${field}.profile`, `must be one of ${launchProfiles.join(", ")}, got "${profileName.slice(0, 32)}"`);
  const args = v.args === undefined ? [...(base?.args ?? [])] : stringList(v.args, `${field}.args`);
  if (profile === "localai") checkLocalaiEntry(field, args, env);
  const cwd = v.cwd === undefined ? (profile === "localai" ? localaiCwd(command) : base?.cwd) : str(v.cwd, `${field}.cwd`);
  return { command, args, env, envAllow, cwd, profile, ...backendTlsField(v.tls, `${field}.tls`), ...(bundle === undefined ? {} : { bundle }) };
}

function backendTlsField(v: unknown, field: string): Pick<CatalogEntry, "tls"> {
  if (v === undefined) return {};
  if (!isRecord(v)) throw invalidArgument(field, "must be a map with ca and optionally serverName");
  rejectUnknown(v, new Set(["ca", "serverName"]), field);
  const serverName = v.serverName === undefined ? undefined : str(v.serverName, `${field}.serverName`);
  return { tls: { caFile: str(v.ca, `${field}.ca`), serverName } };
}
