import { Code, WardenError } from "@warden/common";
import { isNode, type Document, type LineCounter } from "yaml";

/** `catalog.llama.args[0]` → `["catalog", "llama", "args", 0]`; undefined for paths that are not a key path (`(root)`). */
function keyPath(field: string): (string | number)[] | undefined {
  const out: (string | number)[] = [];
  for (const part of field.split(".")) {
    const m = /^([^[\]]*)((?:\[\d+\])*)$/.exec(part);
    if (m === null) return undefined;
    if (m[1] !== undefined && m[1] !== "") out.push(m[1]);
    for (const idx of (m[2] ?? "").matchAll(/\[(\d+)\]/g)) out.push(Number(idx[1]));
  }
  return out.length === 0 ? undefined : out;
}

/**
 * Adds the YAML line of the offending field to a config error
 * (`catalog.llama.args: … (line 7)`), so an operator finds it in a long file.
 * The field is the one invalidArgument recorded; when the field itself is
 * absent from the file (a required one), its nearest present parent is named.
 */
export function withConfigLine(err: unknown, doc: Document, lines: LineCounter): unknown {
  if (!(err instanceof WardenError) || err.code !== Code.InvalidArgument) return err;
  const field = err.details.field;
  if (typeof field !== "string") return err;
  const path = keyPath(field);
  if (path === undefined) return err;
  for (let n = path.length; n > 0; n--) {
    const node: unknown = doc.getIn(path.slice(0, n), true);
    if (isNode(node) && node.range !== undefined && node.range !== null) {
      const { line } = lines.linePos(node.range[0]);
      return new WardenError(err.code, `${err.rawMessage} (line ${String(line)})`, { details: { ...err.details, line }, cause: err });
    }
  }
  return err;
}
