import { describe, expect, it } from "vitest";
import { create, toBinary, type DescField, type DescMessage } from "@bufbuild/protobuf";
import { Code, isWardenError } from "@warden/common";
import { Backend, PredictOptionsSchema, TTSRequestSchema } from "@warden/proto";
import { backendPathPlans, breaks, looksLikePath, pathPlanOf, scanRequest, type PathPlan } from "./backend-path-check.js";
import { backendPathRules, type PathRule } from "./backend-path-rules.js";
import { backendMethodTable } from "../routing/backend-identity.js";

/** Field names that may name a file on the node: each such field of every request must have a rule. */
const pathLike = /dst|src|path|file|dir|folder|audio|image|img|video|voice|model|checkpoint|output|dataset|lora|mmproj|tokenizer|controlnet|export|url/i;

/** A field reached from a method's request: the chain of fields leading to it. */
interface Reached {
  readonly method: string;
  readonly chain: readonly DescField[];
}

/** Every field of every message a request can carry, with a chain from the method's input (first chain per field). */
function reachable(): Map<string, Reached> {
  const out = new Map<string, Reached>();
  const visit = (method: string, msg: DescMessage, chain: readonly DescField[], open: Set<string>): void => {
    if (open.has(msg.typeName)) return;
    for (const f of msg.fields) {
      const key = `${msg.name}.${f.name}`;
      if (!out.has(key)) out.set(key, { method, chain: [...chain, f] });
      const inner = f.fieldKind === "message" || (f.fieldKind === "list" && f.listKind === "message") ? f.message : undefined;
      if (inner !== undefined) visit(method, inner, [...chain, f], new Set([...open, msg.typeName]));
    }
  };
  for (const m of Backend.methods) visit(m.name, m.input, [], new Set());
  return out;
}

/** A value for `f` that breaks `rule`, in the shape protobuf-es's `create` takes. */
function valueOf(f: DescField, s: string): unknown {
  if (f.fieldKind === "list") return [s];
  if (f.fieldKind === "map") return { k: s };
  return s;
}

/** The init object setting the last field of `chain` to `leaf`, through nested messages and oneofs. */
function initOf(chain: readonly DescField[], leaf: unknown): Record<string, unknown> {
  const [f, ...rest] = chain;
  if (f === undefined) return {};
  let v: unknown = rest.length === 0 ? leaf : initOf(rest, leaf);
  if (rest.length > 0 && f.fieldKind === "list") v = [v];
  return f.oneof === undefined ? { [f.localName]: v } : { [f.oneof.localName]: { case: f.localName, value: v } };
}

function planOf(method: string): PathPlan {
  const plan = backendPathPlans.get(method);
  if (plan === undefined) throw new Error(`no path plan for ${method}`);
  return plan;
}

const breaking: Readonly<Record<PathRule["kind"], string>> = { refuse: "/tmp/x/evil.wav", name: "../voices/x.wav", noPaths: "key:/etc/passwd", content: "" };
const allowed: Readonly<Record<PathRule["kind"], string>> = { refuse: "", name: "alloy", noPaths: "fast:true", content: "" };

describe("backend.Backend path rules", () => {
  const fields = reachable();

  it("every request field named like a path, in every method's request, has a rule", () => {
    const missing = [...fields.keys()].filter((k) => pathLike.test(k.split(".")[1] ?? "") && !k.endsWith(".ModelIdentity") && backendPathRules[k] === undefined);
    expect(missing).toEqual([]);
  });

  it("every rule names a field a request can carry, with a reason; the plans build", () => {
    for (const [key, rule] of Object.entries(backendPathRules)) {
      expect(fields.has(key), key).toBe(true);
      expect(rule.reason.length, key).toBeGreaterThan(10);
    }
    for (const m of Backend.methods) expect(() => pathPlanOf(m.input)).not.toThrow();
  });

  it("the methods that are inspected are exactly those whose request can carry a ruled field", () => {
    const ruled = new Set(Object.entries(backendPathRules).filter(([, r]) => r.kind !== "content").map(([k]) => fields.get(k)?.method));
    // Each ruled field's first method is inspected; hot methods without one (Health, Status, Rerank, …) never are.
    for (const m of ruled) expect(backendPathPlans.has(m ?? ""), m).toBe(true);
    for (const name of ["Health", "Status", "Rerank", "Score", "Detokenize", "VAD", "Forward", "StoresFind"]) expect(backendPathPlans.has(name), name).toBe(false);
    expect([...(backendPathPlans.get("Predict")?.fields.values() ?? [])].map((s) => s.name)).toEqual(["PredictOptions.PromptCachePath"]);
  });

  const cases = Object.entries(backendPathRules).filter(([, r]) => r.kind !== "content");
  it.each(cases)("%s: a value that names a file is PERMISSION_DENIED naming the field; a harmless one passes", (key, rule) => {
    const at = fields.get(key);
    if (at === undefined) throw new Error(`no field ${key}`);
    const method = backendMethodTable.get(at.method);
    if (method === undefined) throw new Error(at.method);
    const leaf = at.chain[at.chain.length - 1];
    if (leaf === undefined) throw new Error(key);
    const input = method.method.input;
    const plan = planOf(at.method);
    const bad = toBinary(input, create(input, initOf(at.chain, valueOf(leaf, breaking[rule.kind]))));
    const r = scanRequest(bad, input, method.identityField, plan);
    expect(isWardenError(r.refusal, Code.PermissionDenied), key).toBe(true);
    expect(r.refusal?.details).toEqual({ field: key });
    expect(r.refusal?.message).toContain(key);
    const ok = toBinary(input, create(input, initOf(at.chain, valueOf(leaf, allowed[rule.kind]))));
    expect(scanRequest(ok, input, method.identityField, plan).refusal, key).toBeUndefined();
  });

  it("reads the identity in the same pass, the last occurrence winning, and skips unknown fields", () => {
    const a = toBinary(TTSRequestSchema, create(TTSRequestSchema, { text: "hi", ModelIdentity: "first", voice: "alloy" }));
    const unknown = Uint8Array.of(0xa0, 0x06, 0x01);
    const b = toBinary(TTSRequestSchema, create(TTSRequestSchema, { ModelIdentity: "second" }));
    const r = scanRequest(new Uint8Array([...a, ...unknown, ...b]), TTSRequestSchema, 8, planOf("TTS"));
    expect(r).toEqual({ identity: "second", refusal: undefined });
    const p = toBinary(PredictOptionsSchema, create(PredictOptionsSchema, { Prompt: "x", PromptCachePath: "/home/agent/.bashrc", ModelIdentity: "m" }));
    expect(scanRequest(p, PredictOptionsSchema, 54, planOf("Predict")).refusal?.details).toEqual({ field: "PredictOptions.PromptCachePath" });
  });

  it("bytes that are not wire format are INVALID_ARGUMENT naming the message", () => {
    expect(() => scanRequest(Uint8Array.of(0x1a, 0x05, 0x61), TTSRequestSchema, 8, planOf("TTS"))).toThrow(/backend\.TTSRequest/);
  });

  it.each([
    ["/etc/passwd", true],
    ["~/.ssh/id_rsa", true],
    ["..", true],
    ["a/../../b", true],
    ["C:\\x", true],
    ["file:///etc/passwd", true],
    ["\\\\host\\share", true],
    ["Qwen/Qwen2-0.5B", false],
    ["model.gguf", false],
    ["0.5", false],
    ["a..b", false],
  ])("looksLikePath(%j) is %s", (value, expected) => {
    expect(looksLikePath(value)).toBe(expected);
  });

  it("key:value settings are judged by their value; plain names take no separators", () => {
    const free: PathRule = { kind: "noPaths", reason: "test" };
    expect(breaks(free, "cache:/tmp/x")).toBeDefined();
    expect(breaks(free, "cache_type_k:q8_0")).toBeUndefined();
    const plain: PathRule = { kind: "name", reason: "test" };
    for (const v of ["a/b", "a\\b", ".", "..", "a\0b"]) expect(breaks(plain, v), v).toBeDefined();
    expect(breaks(plain, "en_US-amy-medium")).toBeUndefined();
  });
});
