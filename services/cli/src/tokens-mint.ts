import { writeFile } from "node:fs/promises";
import { invalidArgument } from "@warden/common";
import type { CliIo } from "./action-context.js";

export interface TokensMintOptions {
  role: string;
  node?: string;
  models?: string;
  name?: string;
  priority?: string;
  out?: string;
}

/**
 * `warden tokens mint`: a new token and its tokens-file line. With `--out`,
 * the token goes to that file (mode 0600, never overwritten) and only the
 * line is printed; without, both are printed (the token once, on stdout).
 */
export async function tokensMint(io: CliIo, o: TokensMintOptions): Promise<number> {
  // The coordinator's token file module alone (node:crypto and @warden/common), not the whole coordinator.
  const { TokenTable, mintToken, roles, tokenLine } = await import("../../coordinator/src/auth/token-table.js");
  if (!(roles as readonly string[]).includes(o.role)) throw invalidArgument("--role", `must be one of ${roles.join(", ")}, got ${JSON.stringify(o.role)}`);
  const role = o.role as (typeof roles)[number];
  const token = mintToken();
  const line = tokenLine(token, role, {
    ...(o.node === undefined ? {} : { node: o.node }),
    ...(o.models === undefined ? {} : { models: o.models.split(",") }),
    ...(o.name === undefined ? {} : { name: o.name }),
  });
  // priority= is checked by the parser below, like every other field of the line.
  const full = o.priority === undefined ? line : `${line} priority=${o.priority}`;
  // The coordinator's own parser: a line it would refuse is refused here, naming the problem.
  TokenTable.parse(full, "line");
  if (o.out !== undefined) {
    await writeFile(o.out, `${token}\n`, { mode: 0o600, flag: "wx" }).catch((err: unknown) => {
      throw invalidArgument("--out", `cannot create ${o.out ?? ""}: ${(err as NodeJS.ErrnoException).code ?? "error"} (an existing file is never overwritten)`);
    });
    io.err.write(`token written to ${o.out} (mode 0600); add this line to the coordinator's auth.tokensFile:\n`);
    io.out.write(`${full}\n`);
    return 0;
  }
  io.err.write("token (shown once; give it to the client, e.g. WARDEN_TOKEN or a --token-file):\n");
  io.out.write(`${token}\n`);
  io.err.write("add this line to the coordinator's auth.tokensFile:\n");
  io.out.write(`${full}\n`);
  return 0;
}
