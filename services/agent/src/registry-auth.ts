import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { invalidArgument } from "@warden/common";

/** One registry's user and password: sent with HTTP Basic to the registry, or to its Bearer token realm. */
export interface RegistryLogin {
  readonly username: string;
  readonly password: string;
}

/** Logins by registry `host[:port]`, lowercase (the host of an `oci://` reference). */
export type RegistryLogins = ReadonlyMap<string, RegistryLogin>;

/** Finds the login for a registry host; undefined = pull anonymously. What the OCI client is given per pull. */
export type RegistryLoginLookup = (host: string) => RegistryLogin | undefined;

/** Largest credentials file read (one with every host at its longest password is about 6 MiB; real ones are a few KiB). */
export const maxRegistryAuthFileBytes = 1024 * 1024;
/** Most registries one file may list. */
export const maxRegistryAuthHosts = 256;
/** Longest user name, in characters. */
export const maxRegistryUsernameChars = 256;
/** Longest password, in characters (cloud registries' tokens used as passwords run to a few KiB). */
export const maxRegistryPasswordChars = 16 * 1024;
/** Longest `auth` value: base64 of the longest `user:password`. */
const maxAuthChars = Math.ceil((maxRegistryUsernameChars + 1 + maxRegistryPasswordChars) / 3) * 4;

// Fields of an `auths` entry as Docker's AuthConfig has them. email and serveraddress are legacy and ignored.
const entryFields = new Set(["auth", "username", "password", "email", "serveraddress", "identitytoken", "registrytoken"]);
const hostPattern = /^[a-z0-9.-]{1,253}(?::\d{1,5})?$|^\[[0-9a-f:.]{2,45}\](?::\d{1,5})?$/;
const base64Pattern = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
/** A control character in a name or password is a mistake in the file (a pasted newline), never a credential. */
function hasControlChar(v: string): boolean {
  for (let i = 0; i < v.length; i++) {
    const c = v.charCodeAt(i);
    if (c < 0x20 || c === 0x7f) return true;
  }
  return false;
}
const utf8 = new TextDecoder("utf-8", { fatal: true });
// Docker Hub is written under several names: `docker login` stores "https://index.docker.io/v1/".
const dockerHubNames = ["index.docker.io", "docker.io", "registry-1.docker.io"];

/**
 * The registry host an `auths` key names, as Docker reads it: a scheme and a
 * path are dropped ("https://index.docker.io/v1/" → "index.docker.io"),
 * letters are lowercased. undefined when what is left is not `host[:port]`.
 */
export function registryHostOf(key: string): string | undefined {
  const host = key.replace(/^https?:\/\//i, "").split("/")[0]?.toLowerCase() ?? "";
  return hostPattern.test(host) ? host : undefined;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Where JSON.parse stopped, as line:column; never its message, which may quote the file (a password). */
function jsonErrorPlace(text: string, err: unknown): string {
  const at = /position (\d+)/.exec(err instanceof Error ? err.message : "")?.[1];
  if (at === undefined) return "";
  const before = text.slice(0, Number(at));
  const line = before.split("\n").length;
  return ` (line ${String(line)}, column ${String(before.length - before.lastIndexOf("\n"))})`;
}

function checkPart(v: string, field: string, what: string, max: number): string {
  if (v === "") throw invalidArgument(field, `the ${what} is empty`);
  if (v.length > max) throw invalidArgument(field, `the ${what} is longer than ${String(max)} characters`);
  if (hasControlChar(v)) throw invalidArgument(field, `the ${what} holds a control character (a stray newline?)`);
  return v;
}

/** `auth`: base64 of "user:password" (the password may hold ':'; the name may not). */
function decodeAuth(v: unknown, field: string): RegistryLogin {
  if (typeof v !== "string") throw invalidArgument(field, "must be a string: base64 of user:password");
  if (v.length > maxAuthChars) throw invalidArgument(field, `is longer than ${String(maxAuthChars)} characters`);
  if (!base64Pattern.test(v)) throw invalidArgument(field, "is not base64 (standard alphabet, padded with '=')");
  let text: string;
  try {
    text = utf8.decode(Buffer.from(v, "base64"));
  } catch {
    throw invalidArgument(field, "does not decode to UTF-8 text");
  }
  const colon = text.indexOf(":");
  if (colon < 0) throw invalidArgument(field, "does not decode to user:password (no ':')");
  return {
    username: checkPart(text.slice(0, colon), field, "user name", maxRegistryUsernameChars),
    password: checkPart(text.slice(colon + 1), field, "password", maxRegistryPasswordChars),
  };
}

function entryLogin(v: unknown, field: string): RegistryLogin {
  if (!isRecord(v)) throw invalidArgument(field, "must be a map with auth, or username and password");
  for (const k of Object.keys(v)) if (!entryFields.has(k)) throw invalidArgument(`${field}.${k.slice(0, 64)}`, `unknown field (allowed: ${[...entryFields].join(", ")})`);
  for (const k of ["identitytoken", "registrytoken"]) {
    if (v[k] !== undefined && v[k] !== "") throw invalidArgument(`${field}.${k}`, "tokens are not supported: give auth, or username and password");
  }
  const given = (k: "username" | "password"): string | undefined => {
    const x = v[k];
    if (x === undefined || x === "") return undefined;
    if (typeof x !== "string") throw invalidArgument(`${field}.${k}`, "must be a string");
    return x;
  };
  const username = given("username");
  const password = given("password");
  if (v.auth !== undefined && v.auth !== "") {
    const login = decodeAuth(v.auth, `${field}.auth`);
    // Both forms at once must say the same, or which one is used would be a guess.
    if ((username !== undefined && username !== login.username) || (password !== undefined && password !== login.password)) {
      throw invalidArgument(field, "auth and username/password disagree; give one of them");
    }
    return login;
  }
  if (username === undefined && password === undefined) {
    throw invalidArgument(field, "holds no credentials: give auth, or username and password (a credential store's or helper's are not read)");
  }
  if (username === undefined) throw invalidArgument(`${field}.username`, "required beside password");
  if (password === undefined) throw invalidArgument(`${field}.password`, "required beside username");
  if (username.includes(":")) throw invalidArgument(`${field}.username`, "must not contain ':' (HTTP Basic splits on it)");
  return {
    username: checkPart(username, `${field}.username`, "user name", maxRegistryUsernameChars),
    password: checkPart(password, `${field}.password`, "password", maxRegistryPasswordChars),
  };
}

/**
 * Reads a registry credentials file in the format of Docker's `config.json`
 * (what `docker login`, `podman login` and `skopeo login --authfile` write):
 * `{"auths": {"host[:port]": {"auth": "<base64 of user:password>"}}}`, or
 * `username` and `password` in place of `auth`. Pure: validated whole, so a
 * file with one bad entry is refused entirely. Errors are INVALID_ARGUMENT
 * naming the field (`<field>.auths["host:5000"].auth`) and never quoting a
 * secret. Other top-level settings of a Docker config are ignored, except a
 * credential store or helpers (`credsStore`, `credHelpers`): their
 * credentials are not in the file, and the agent runs no helper programs.
 * Bounds: {@link maxRegistryAuthHosts}, {@link maxRegistryUsernameChars},
 * {@link maxRegistryPasswordChars}; the file size is the reader's.
 */
export function parseRegistryAuth(text: string, field: string): Map<string, RegistryLogin> {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    throw invalidArgument(field, `is not JSON${jsonErrorPlace(text, err)}`);
  }
  if (!isRecord(doc)) throw invalidArgument(field, 'must be a JSON object like {"auths": {"host:port": {"auth": "…"}}}');
  for (const k of ["credsStore", "credHelpers"]) {
    const v = doc[k];
    if (v !== undefined && v !== "" && !(isRecord(v) && Object.keys(v).length === 0)) {
      throw invalidArgument(`${field}.${k}`, "credential helpers are not run by the agent: write the credentials into auths (skopeo login --authfile <file>)");
    }
  }
  const auths = doc.auths;
  if (!isRecord(auths)) throw invalidArgument(`${field}.auths`, auths === undefined ? "required: a map of registry host to credentials" : "must be a map of registry host to credentials");
  const keys = Object.keys(auths);
  if (keys.length > maxRegistryAuthHosts) throw invalidArgument(`${field}.auths`, `at most ${String(maxRegistryAuthHosts)} registries, got ${String(keys.length)}`);
  const out = new Map<string, RegistryLogin>();
  const from = new Map<string, string>();
  for (const key of keys) {
    const at = `${field}.auths[${JSON.stringify(key.slice(0, 128))}]`;
    const host = registryHostOf(key);
    if (host === undefined) throw invalidArgument(at, key.trim() === "" ? "missing host: the key must be host[:port]" : "the key is not a registry host[:port]");
    const earlier = from.get(host);
    if (earlier !== undefined) throw invalidArgument(at, `names the registry ${host} again (as ${JSON.stringify(earlier.slice(0, 128))} does)`);
    from.set(host, key);
    out.set(host, entryLogin(auths[key], at));
  }
  return out;
}

/** The login for `host` (an `oci://` reference's host[:port]); Docker Hub under any of its names. */
export function registryLoginFor(logins: RegistryLogins, host: string): RegistryLogin | undefined {
  const h = host.toLowerCase();
  const exact = logins.get(h);
  if (exact !== undefined || !dockerHubNames.includes(h)) return exact;
  for (const name of dockerHubNames) {
    const l = logins.get(name);
    if (l !== undefined) return l;
  }
  return undefined;
}

/** A credentials file as read: its logins, and its permission bits when group or others may read it. */
export interface RegistryAuthFile {
  readonly logins: Map<string, RegistryLogin>;
  /** The file's mode (e.g. 0o644) when group or others can read it; undefined when only its owner can. */
  readonly exposedMode: number | undefined;
}

/**
 * Reads and parses the file `registryAuthFile` names: a regular file of at
 * most {@link maxRegistryAuthFileBytes}. The caller warns about an exposed
 * mode; nothing here logs, and no error quotes the file's contents.
 */
export function readRegistryAuthFile(path: string, field: string): RegistryAuthFile {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch (err) {
    throw invalidArgument(field, `cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? "error"}`);
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw invalidArgument(field, `${path} is not a regular file`);
    if (st.size > maxRegistryAuthFileBytes) throw invalidArgument(field, `${path} has ${String(st.size)} bytes, more than the ${String(maxRegistryAuthFileBytes)} allowed`);
    // One byte past the bound is read so a file that grew after the stat is caught too.
    const buf = Buffer.alloc(maxRegistryAuthFileBytes + 1);
    let n = 0;
    for (;;) {
      const got = readSync(fd, buf, n, buf.length - n, null);
      n += got;
      if (got === 0 || n === buf.length) break;
    }
    if (n > maxRegistryAuthFileBytes) throw invalidArgument(field, `${path} is larger than the ${String(maxRegistryAuthFileBytes)} bytes allowed`);
    return { logins: parseRegistryAuth(buf.subarray(0, n).toString("utf8"), field), exposedMode: (st.mode & 0o044) === 0 ? undefined : st.mode & 0o777 };
  } finally {
    closeSync(fd);
  }
}
