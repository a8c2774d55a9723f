import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, isWardenError } from "@warden/common";
import { maxRegistryAuthFileBytes, maxRegistryAuthHosts, maxRegistryPasswordChars, maxRegistryUsernameChars, parseRegistryAuth, readRegistryAuthFile, registryHostOf, registryLoginFor } from "./registry-auth.js";

const secret = "s3cr:et";
const b64 = (s: string): string => Buffer.from(s, "utf8").toString("base64");
const file = (auths: unknown, extra: Record<string, unknown> = {}): string => JSON.stringify({ ...extra, auths });

/** The INVALID_ARGUMENT message of a refused file; it must never quote the password. */
function refusal(text: string): string {
  try {
    parseRegistryAuth(text, "registryAuthFile");
  } catch (err) {
    if (!isWardenError(err, Code.InvalidArgument)) throw err;
    expect(err.rawMessage).not.toContain(secret);
    expect(err.rawMessage).not.toContain(b64(`alice:${secret}`));
    return err.rawMessage;
  }
  throw new Error("expected INVALID_ARGUMENT");
}

describe("registry credentials file (Docker config.json format)", () => {
  it("reads auth and username/password entries, by host as Docker names them", () => {
    const logins = parseRegistryAuth(
      file({
        "registry.example:5000": { auth: b64(`alice:${secret}`) },
        "https://Index.Docker.io/v1/": { username: "bob", password: "pw", email: "b@example" },
        "ghcr.io": { auth: b64("carol:tok"), username: "carol", password: "tok" },
      }, { HttpHeaders: { "User-Agent": "x" }, credHelpers: {}, psFormat: "table" }),
      "registryAuthFile",
    );
    // the password may hold ':' (only the first one splits)
    expect(logins.get("registry.example:5000")).toEqual({ username: "alice", password: secret });
    expect(logins.get("index.docker.io")).toEqual({ username: "bob", password: "pw" });
    expect(logins.get("ghcr.io")).toEqual({ username: "carol", password: "tok" });
    // Docker Hub under the name its API answers at; other hosts only as written (any case)
    expect(registryLoginFor(logins, "registry-1.docker.io")).toEqual({ username: "bob", password: "pw" });
    expect(registryLoginFor(logins, "Registry.Example:5000")?.username).toBe("alice");
    expect(registryLoginFor(logins, "registry.example")).toBeUndefined();
    expect(registryHostOf("http://[::1]:5000/v2")).toBe("[::1]:5000");
  });

  it("bad JSON names the place, never the text", () => {
    expect(refusal(`{"auths": {"h": {"auth": "${b64(`alice:${secret}`)}" "x"}}}`)).toMatch(/^registryAuthFile: is not JSON \(line 1, column \d+\)$/);
    expect(refusal("[]")).toContain("registryAuthFile: must be a JSON object");
    expect(refusal("{}")).toBe("registryAuthFile.auths: required: a map of registry host to credentials");
    expect(refusal(`{"auths": []}`)).toBe("registryAuthFile.auths: must be a map of registry host to credentials");
  });

  it("bad base64, no user:password, bad UTF-8 and control characters name the host's field", () => {
    const at = 'registryAuthFile.auths["r.example"]';
    expect(refusal(file({ "r.example": { auth: `${b64(`alice:${secret}`)}!` } }))).toBe(`${at}.auth: is not base64 (standard alphabet, padded with '=')`);
    expect(refusal(file({ "r.example": { auth: b64("alice:pw").replace(/=+$/, "") } }))).toContain(`${at}.auth: is not base64`);
    expect(refusal(file({ "r.example": { auth: b64(secret.replace(":", "")) } }))).toBe(`${at}.auth: does not decode to user:password (no ':')`);
    expect(refusal(file({ "r.example": { auth: Buffer.from([0x61, 0x3a, 0xff, 0xfe]).toString("base64") } }))).toBe(`${at}.auth: does not decode to UTF-8 text`);
    expect(refusal(file({ "r.example": { auth: b64(`:${secret}`) } }))).toBe(`${at}.auth: the user name is empty`);
    expect(refusal(file({ "r.example": { auth: b64(`alice:${secret}\n`) } }))).toBe(`${at}.auth: the password holds a control character (a stray newline?)`);
    expect(refusal(file({ "r.example": { auth: 42 } }))).toBe(`${at}.auth: must be a string: base64 of user:password`);
  });

  it("a missing host, a host twice, an entry without credentials or with tokens, helpers: each refused naming it", () => {
    const good = { auth: b64(`alice:${secret}`) };
    expect(refusal(file({ "": good }))).toBe('registryAuthFile.auths[""]: missing host: the key must be host[:port]');
    expect(refusal(file({ "https://": good }))).toContain('auths["https://"]: the key is not a registry host[:port]');
    expect(refusal(file({ "r.example:5000": good, "https://r.example:5000/v2/": good }))).toBe('registryAuthFile.auths["https://r.example:5000/v2/"]: names the registry r.example:5000 again (as "r.example:5000" does)');
    expect(refusal(file({ "r.example": {} }))).toContain('auths["r.example"]: holds no credentials: give auth, or username and password');
    expect(refusal(file({ "r.example": { username: "alice" } }))).toBe('registryAuthFile.auths["r.example"].password: required beside username');
    expect(refusal(file({ "r.example": { password: secret } }))).toBe('registryAuthFile.auths["r.example"].username: required beside password');
    expect(refusal(file({ "r.example": { username: "al:ice", password: secret } }))).toContain(".username: must not contain ':'");
    expect(refusal(file({ "r.example": { ...good, username: "bob" } }))).toBe('registryAuthFile.auths["r.example"]: auth and username/password disagree; give one of them');
    expect(refusal(file({ "r.example": { identitytoken: "refresh" } }))).toContain('auths["r.example"].identitytoken: tokens are not supported');
    expect(refusal(file({ "r.example": { ...good, passwd: secret } }))).toContain('auths["r.example"].passwd: unknown field');
    expect(refusal(file({ "r.example": good }, { credsStore: "desktop" }))).toContain("registryAuthFile.credsStore: credential helpers are not run by the agent");
    expect(refusal(file({ "r.example": good }, { credHelpers: { "r.example": "ecr-login" } }))).toContain("registryAuthFile.credHelpers:");
  });

  it("bounds: registries, user name, password, auth length", () => {
    const many = Object.fromEntries(Array.from({ length: maxRegistryAuthHosts + 1 }, (_, i) => [`r${String(i)}.example`, { username: "u", password: "p" }]));
    expect(refusal(file(many))).toBe(`registryAuthFile.auths: at most ${String(maxRegistryAuthHosts)} registries, got ${String(maxRegistryAuthHosts + 1)}`);
    const longest = { username: "u".repeat(maxRegistryUsernameChars), password: "p".repeat(maxRegistryPasswordChars) };
    expect(parseRegistryAuth(file({ "r.example": longest }), "f").get("r.example")).toEqual(longest);
    expect(parseRegistryAuth(file({ "r.example": { auth: b64(`${longest.username}:${longest.password}`) } }), "f").get("r.example")).toEqual(longest);
    expect(refusal(file({ "r.example": { ...longest, username: `${longest.username}u` } }))).toBe(`registryAuthFile.auths["r.example"].username: the user name is longer than ${String(maxRegistryUsernameChars)} characters`);
    expect(refusal(file({ "r.example": { ...longest, password: `${longest.password}p` } }))).toBe(`registryAuthFile.auths["r.example"].password: the password is longer than ${String(maxRegistryPasswordChars)} characters`);
    expect(refusal(file({ "r.example": { auth: b64(`${longest.username}:${longest.password}pppp`) } }))).toMatch(/auths\["r.example"\]\.auth: is longer than \d+ characters$/);
  });
});

describe("reading the file", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "warden-registry-auth-"));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("reports a mode group or others may read; refuses a missing, oversized or non-regular file naming the field", async () => {
    const path = join(dir, "auth.json");
    await writeFile(path, file({ "r.example": { username: "alice", password: secret } }));
    await chmod(path, 0o644);
    expect(readRegistryAuthFile(path, "registryAuthFile")).toMatchObject({ exposedMode: 0o644, logins: new Map([["r.example", { username: "alice", password: secret }]]) });
    await chmod(path, 0o600);
    expect(readRegistryAuthFile(path, "registryAuthFile").exposedMode).toBeUndefined();
    const fail = (p: string): string => {
      try {
        readRegistryAuthFile(p, "registryAuthFile");
      } catch (err) {
        if (isWardenError(err, Code.InvalidArgument)) return err.rawMessage;
        throw err;
      }
      throw new Error("expected INVALID_ARGUMENT");
    };
    expect(fail(join(dir, "none.json"))).toBe(`registryAuthFile: cannot read ${join(dir, "none.json")}: ENOENT`);
    expect(fail(dir)).toBe(`registryAuthFile: ${dir} is not a regular file`);
    const big = join(dir, "big.json");
    await writeFile(big, " ".repeat(maxRegistryAuthFileBytes + 1));
    expect(fail(big)).toBe(`registryAuthFile: ${big} has ${String(maxRegistryAuthFileBytes + 1)} bytes, more than the ${String(maxRegistryAuthFileBytes)} allowed`);
  });
});
