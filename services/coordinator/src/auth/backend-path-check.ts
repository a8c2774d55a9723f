import { ScalarType, type DescField, type DescMessage } from "@bufbuild/protobuf";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import { Code, WardenError } from "@warden/common";
import { undecodableRequest } from "@warden/grpc";
import { Backend } from "@warden/proto";
import { backendPathRules, type PathRule } from "./backend-path-rules.js";

/** One field a request's walk stops at: a ruled string (or map of strings), or a message holding one. */
interface FieldStep {
  /** `Message.field`, as errors and the README name it. */
  readonly name: string;
  readonly rule?: PathRule;
  /** The rule applies to the values of a `map<string, string>` (entry field 2). */
  readonly mapValue?: boolean;
  readonly nested?: PathPlan;
}

/** The field numbers of one message that need a look; every other field is skipped unread. */
export interface PathPlan {
  readonly fields: ReadonlyMap<number, FieldStep>;
  /** The same steps indexed by field number: the walk's lookup, an array read per tag. */
  readonly byNumber: readonly (FieldStep | undefined)[];
}

const isString = (f: DescField): boolean =>
  (f.fieldKind === "scalar" && f.scalar === ScalarType.STRING) || (f.fieldKind === "list" && f.listKind === "scalar" && f.scalar === ScalarType.STRING);

/**
 * The plan for a request message, from its descriptor and the rule table:
 * `undefined` when nothing in it (or in the messages it holds) names a file,
 * so those methods are routed without a second look. A rule on a field that
 * is not a string is a table error, thrown at load.
 */
export function pathPlanOf(message: DescMessage, rules: Readonly<Record<string, PathRule>> = backendPathRules, open: Set<string> = new Set()): PathPlan | undefined {
  if (open.has(message.typeName)) return undefined;
  open.add(message.typeName);
  const fields = new Map<number, FieldStep>();
  for (const f of message.fields) {
    const name = `${message.name}.${f.name}`;
    const rule = rules[name];
    if (rule !== undefined && rule.kind !== "content") {
      if (isString(f)) fields.set(f.number, { name, rule });
      else if (f.fieldKind === "map" && f.mapKind === "scalar" && f.scalar === ScalarType.STRING) fields.set(f.number, { name, rule, mapValue: true });
      else throw new Error(`backend path rules: ${name} is not a string field`);
      continue;
    }
    const inner = f.fieldKind === "message" || (f.fieldKind === "list" && f.listKind === "message") ? f.message : undefined;
    const nested = inner === undefined ? undefined : pathPlanOf(inner, rules, open);
    if (nested !== undefined) fields.set(f.number, { name, nested });
  }
  open.delete(message.typeName);
  if (fields.size === 0) return undefined;
  const byNumber: (FieldStep | undefined)[] = Array.from({ length: Math.max(...fields.keys()) + 1 }, () => undefined);
  for (const [n, step] of fields) byNumber[n] = step;
  return { fields, byNumber };
}

/** Whether a free-form value names a file: absolute, home-relative, a drive, a `file:` URL, or climbing with `..`. */
export function looksLikePath(value: string): boolean {
  return /^(?:[/\\~]|[A-Za-z]:[/\\]|file:)/i.test(value) || /(?:^|[/\\])\.\.(?:[/\\]|$)/.test(value);
}

/** Why `value` breaks `rule`, or undefined. */
export function breaks(rule: PathRule, value: string): string | undefined {
  if (value === "") return undefined;
  switch (rule.kind) {
    case "refuse":
      return `must be empty through Warden (${rule.reason})`;
    case "name":
      return /[/\\\0]/.test(value) || value === "." || value === ".." ? `must be a plain name, not a path (${rule.reason})` : undefined;
    case "noPaths": {
      // "key:value" settings: the value is what a backend would open.
      const colon = value.indexOf(":");
      const tail = colon > 0 && !/^[A-Za-z]:[/\\]/.test(value) ? value.slice(colon + 1) : value;
      return looksLikePath(value) || looksLikePath(tail) ? `must not name a file (${rule.reason})` : undefined;
    }
    case "content":
      return undefined;
  }
}

/** What a request's walk found: the identity it names ("" when absent) and the first ruled field it breaks. */
export interface ScanResult {
  identity: string;
  refusal: WardenError | undefined;
}

function refusal(step: FieldStep, problem: string): WardenError {
  return new WardenError(Code.PermissionDenied, `${step.name}: ${problem}; the OpenAI HTTP routes (/v1/audio/*, /v1/images/*) carry files as bytes`, { details: { field: step.name } });
}

function walk(r: BinaryReader, end: number, plan: PathPlan, identityField: number | undefined, found: ScanResult): void {
  const steps = plan.byNumber;
  while (r.pos < end) {
    const [f, wire] = r.tag();
    if (wire !== WireType.LengthDelimited) {
      r.skip(wire, f);
      continue;
    }
    const step = steps[f];
    if (f === identityField) {
      found.identity = r.string(true);
    } else if (step === undefined || found.refusal !== undefined) {
      r.skip(wire, f);
    } else if (step.nested !== undefined) {
      const inner = r.bytes();
      walk(new BinaryReader(inner), inner.length, step.nested, undefined, found);
    } else if (step.rule !== undefined && step.mapValue === true) {
      const entry = new BinaryReader(r.bytes());
      while (entry.pos < entry.len && found.refusal === undefined) {
        const [ef, ew] = entry.tag();
        const problem = ef === 2 && ew === WireType.LengthDelimited ? breaks(step.rule, entry.string(true)) : (entry.skip(ew, ef), undefined);
        if (problem !== undefined) found.refusal = refusal(step, problem);
      }
    } else if (step.rule !== undefined) {
      // A refused field is refused by its length alone: no decoding.
      const problem = step.rule.kind === "refuse" ? (r.bytes().length > 0 ? breaks(step.rule, "set") : undefined) : breaks(step.rule, r.string(true));
      if (problem !== undefined) found.refusal = refusal(step, problem);
    } else {
      r.skip(wire, f);
    }
  }
}

/**
 * One pass over a request's bytes: the identity at `identityField` (the
 * last occurrence wins, as protobuf says) and, where `plan` is given, the
 * first ruled field the request breaks. Fields without a rule are skipped
 * unread. Bytes that are not wire format, or a ruled string that is not
 * UTF-8, are INVALID_ARGUMENT naming the message.
 */
export function scanRequest(bytes: Uint8Array, message: DescMessage, identityField: number | undefined, plan: PathPlan): ScanResult {
  const found: ScanResult = { identity: "", refusal: undefined };
  try {
    walk(new BinaryReader(bytes), bytes.length, plan, identityField, found);
  } catch (err) {
    throw undecodableRequest(message.typeName, err);
  }
  return found;
}

/** The plan of every `backend.Backend` method whose request can name a file on the node, by method name. */
export const backendPathPlans: ReadonlyMap<string, PathPlan> = new Map(
  Backend.methods.flatMap((m) => {
    const plan = pathPlanOf(m.input);
    return plan === undefined ? [] : [[m.name, plan] as const];
  }),
);
