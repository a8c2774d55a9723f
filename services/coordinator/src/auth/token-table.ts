import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { isPriorityClass, priorityClasses, type PriorityClass } from "@warden/admission";
import { invalidArgument } from "@warden/common";

/**
 * Who may do what. `viewer` reads, `operator` also acts (load, unload, drain,
 * node lost, forget, policy), `admin` may call everything (inference too);
 * `inference` tokens call InferenceService only (optionally only some models);
 * `node` tokens speak NodeService for one node id only.
 */
export type Role = "viewer" | "operator" | "admin" | "inference" | "node";

export const roles: readonly Role[] = ["viewer", "operator", "admin", "inference", "node"];

/** The caller a token stands for. Never holds the token itself. */
export interface Principal {
  readonly role: Role;
  /** For logs: the line's `name=`, else `sha256:` and the first 8 hex digits of the hash. */
  readonly name: string;
  /** `node` tokens: the one node id they may register and heartbeat as. */
  readonly nodeId?: string;
  /** `inference` tokens with `models=`: the only models they may call. */
  readonly models?: ReadonlySet<string>;
  /** `priority=`: the class its calls run at, and the highest they may ask for. Unset: standard. */
  readonly priority?: PriorityClass;
}

/** Bounds of a tokens file. */
export const tokenFileLimits = Object.freeze({
  maxBytes: 32 * 1024 * 1024,
  maxEntries: 65_536,
  maxModelsPerToken: 256,
  maxNameChars: 64,
});

const idPattern = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
const hashPattern = /^sha256:([0-9a-f]{64})$/;
/** Minted tokens: a prefix that makes a leaked one easy to find and redact, then 256 random bits. */
export const tokenPrefix = "wdn_";
export const tokenPattern = /wdn_[A-Za-z0-9_-]{20,}/g;

/** The hash the tokens file stores for `token`: `sha256:` and 64 lowercase hex digits. */
export function hashToken(token: string): string {
  return `sha256:${createHash("sha256").update(token, "utf8").digest("hex")}`;
}

/** The SHA-256 of `token` in hex: what an open stream keeps instead of the token (TokenTable.lookupDigest). */
export function digestOfToken(token: string): string {
  return createHash("sha256").update(token, "utf8").digest("hex");
}

/** A new high-entropy token (32 random bytes, base64url). */
export function mintToken(): string {
  return `${tokenPrefix}${randomBytes(32).toString("base64url")}`;
}

/** The tokens-file line for a token of `role` (its hash, never the token). */
export function tokenLine(token: string, role: Role, extra: { readonly node?: string; readonly models?: readonly string[]; readonly name?: string; readonly priority?: PriorityClass } = {}): string {
  const parts = [hashToken(token), role];
  if (extra.node !== undefined) parts.push(`node=${extra.node}`);
  if (extra.models !== undefined && extra.models.length > 0) parts.push(`models=${extra.models.join(",")}`);
  if (extra.priority !== undefined) parts.push(`priority=${extra.priority}`);
  if (extra.name !== undefined) parts.push(`name=${extra.name}`);
  return parts.join(" ");
}

/**
 * The parsed tokens file: digest → principal. A presented token is hashed
 * and looked up by its digest, then the digests are compared in constant
 * time; what the lookup's timing could reveal is about the SHA-256 of a
 * guess, which does not help to find a token.
 */
export class TokenTable {
  private constructor(private readonly byDigest: ReadonlyMap<string, { readonly principal: Principal; readonly digest: Buffer }>) {}

  get size(): number {
    return this.byDigest.size;
  }

  /** The principal of `token`, or undefined when no line matches. */
  lookup(token: string): Principal | undefined {
    const digest = createHash("sha256").update(token, "utf8").digest();
    const hex = digest.toString("hex");
    const e = this.byDigest.get(hex);
    if (e === undefined) return undefined;
    return timingSafeEqual(e.digest, digest) ? e.principal : undefined;
  }

  /** The principal of a token already hashed (`hex`: its SHA-256, as digestOfToken gives): re-checking an open stream on reload without holding the token. */
  lookupDigest(hex: string): Principal | undefined {
    return this.byDigest.get(hex)?.principal;
  }

  /**
   * Parses a tokens file: one token per line, `sha256:<hex> <role> [node=<id>]
   * [models=<a,b>] [priority=critical|standard|sheddable] [name=<label>]`; `#` starts a comment. Refused whole
   * (INVALID_ARGUMENT naming `field:line`) on any bad line, so a typo never
   * leaves a half-applied table.
   */
  static parse(text: string, field: string): TokenTable {
    const steps = TokenTable.parseSteps(text, field, Number.POSITIVE_INFINITY);
    for (;;) {
      const r = steps.next();
      if (r.done === true) return r.value;
    }
  }

  /**
   * {@link parse} in steps: it stops once the text is split into lines, then
   * after every `linesPerStep` lines, so a caller that gives its event loop a
   * turn at each stop (readTokenTable) is never stalled for the whole parse of
   * a 65 536-token file. The table exists only once the last step is done: a
   * refused file changes nothing.
   */
  static *parseSteps(text: string, field: string, linesPerStep: number): Generator<void, TokenTable, void> {
    const L = tokenFileLimits;
    if (Buffer.byteLength(text, "utf8") > L.maxBytes) throw invalidArgument(field, `at most ${String(L.maxBytes)} bytes`);
    const out = new Map<string, { principal: Principal; digest: Buffer }>();
    const lines = text.split("\n");
    for (const [i, raw] of lines.entries()) {
      if (i % linesPerStep === 0) yield;
      const line = raw.replace(/#.*$/, "").trim();
      if (line === "") continue;
      const at = `${field}:${String(i + 1)}`;
      // Six fields at most are valid (hash, role, then node=, models=, priority=, name= once each): a seventh
      // is refused below like any extra field, and a line of a million words is not split a million times.
      const [hash = "", role = "", ...rest] = line.split(/\s+/, 7);
      const m = hashPattern.exec(hash);
      if (m?.[1] === undefined) throw invalidArgument(at, "must start with sha256:<64 lowercase hex digits> (the hash of a token, never the token: `warden tokens mint` prints it)");
      if (!roles.includes(role as Role)) throw invalidArgument(at, `role must be one of ${roles.join(", ")}, got ${JSON.stringify(role.slice(0, 32))}`);
      const kv = new Map<string, string>();
      for (const r of rest) {
        const eq = r.indexOf("=");
        const k = eq < 0 ? r : r.slice(0, eq);
        if (eq < 0 || !["node", "models", "name", "priority"].includes(k) || kv.has(k)) throw invalidArgument(at, `expected node=, models=, priority= or name= once each, got ${JSON.stringify(r.slice(0, 32))}`);
        kv.set(k, r.slice(eq + 1));
      }
      const node = kv.get("node");
      const models = kv.get("models");
      const name = kv.get("name");
      const priorityWord = kv.get("priority");
      if (priorityWord !== undefined && !isPriorityClass(priorityWord)) throw invalidArgument(at, `priority= must be one of ${priorityClasses.join(", ")}, got ${JSON.stringify(priorityWord.slice(0, 32))}`);
      if (priorityWord !== undefined && role === "node") throw invalidArgument(at, "priority= is for tokens that call models, not node tokens");
      if ((role === "node") !== (node !== undefined)) throw invalidArgument(at, role === "node" ? "a node token needs node=<node id>" : "node= is for node tokens only");
      if (node !== undefined && !idPattern.test(node)) throw invalidArgument(at, `node=${JSON.stringify(node.slice(0, 32))} must match ${idPattern.source}`);
      if (models !== undefined && role !== "inference") throw invalidArgument(at, "models= is for inference tokens only");
      const modelList = models === undefined ? undefined : models.split(",");
      if (modelList !== undefined && (modelList.length > L.maxModelsPerToken || modelList.some((x) => !idPattern.test(x)))) throw invalidArgument(at, `models= takes 1..${String(L.maxModelsPerToken)} model ids separated by commas`);
      if (name !== undefined && (name === "" || name.length > L.maxNameChars || !idPattern.test(name))) throw invalidArgument(at, `name= must match ${idPattern.source} (at most ${String(L.maxNameChars)} characters)`);
      if (out.has(m[1])) throw invalidArgument(at, "the same token hash appears twice");
      if (out.size >= L.maxEntries) throw invalidArgument(field, `at most ${String(L.maxEntries)} tokens`);
      const principal: Principal = {
        role: role as Role,
        name: name ?? `sha256:${m[1].slice(0, 8)}`,
        ...(node === undefined ? {} : { nodeId: node }),
        ...(modelList === undefined ? {} : { models: new Set(modelList) }),
        ...(priorityWord === undefined ? {} : { priority: priorityWord }),
      };
      out.set(m[1], { principal, digest: Buffer.from(m[1], "hex") });
    }
    return new TokenTable(out);
  }
}
