/** Tokens files for auth tests: fresh tokens per role, their lines written to a file in `dir`. */
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { PriorityClass } from "@warden/admission";
import { mintToken, tokenLine, type Role } from "@warden/coordinator";
import { bearerMetadata } from "@warden/grpc";

export interface TokenSpec {
  readonly role: Role;
  readonly node?: string;
  readonly models?: readonly string[];
  readonly priority?: PriorityClass;
}

/** Writes `<dir>/tokens` with one fresh token per spec; returns the path and each token by its key. */
export async function writeTokensFile<K extends string>(dir: string, specs: Readonly<Record<K, TokenSpec>>): Promise<{ path: string; tokens: Record<K, string> }> {
  const tokens = {} as Record<K, string>;
  const lines: string[] = ["# test tokens"];
  for (const [key, spec] of Object.entries(specs) as [K, TokenSpec][]) {
    const t = mintToken();
    tokens[key] = t;
    lines.push(tokenLine(t, spec.role, { ...(spec.node === undefined ? {} : { node: spec.node }), ...(spec.models === undefined ? {} : { models: spec.models }), ...(spec.priority === undefined ? {} : { priority: spec.priority }), name: key }));
  }
  const path = join(dir, "tokens");
  await writeFile(path, `${lines.join("\n")}\n`, { mode: 0o600 });
  return { path, tokens };
}

/** Client options that send `token` as a bearer token. */
export function withToken(token: string | undefined): { headers?: Readonly<Record<string, string>> } {
  return token === undefined ? {} : { headers: bearerMetadata(token) };
}
