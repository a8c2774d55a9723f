import { invalidArgument } from "@warden/common";

/**
 * A model's chat prompt template (YAML `models[].promptTemplate`), for
 * backends that do not template chat themselves. Without one, chat goes to
 * the backend as LocalAI sends it to backends that template themselves:
 * PredictOptions.Messages with UseTokenizerTemplate. With one, the messages
 * are rendered here into PredictOptions.Prompt:
 *
 *   prompt = prefix + message(m1) + message(m2) + … + generation
 *
 * where `message` is rendered per message with `{{role}}`, `{{content}}` and
 * `{{name}}` replaced (nothing else is special).
 */
export interface PromptTemplate {
  /** Rendered once per message. Required. */
  readonly message: string;
  /** Before the first message. @default "" */
  readonly prefix: string;
  /** After the last message: where the assistant's answer begins. @default "" */
  readonly generation: string;
}

/** Longest template string (each of message, prefix, generation). */
export const maxTemplateChars = 16 * 1024;

const templateFields = ["message", "prefix", "generation"];

function part(v: unknown, field: string, required: boolean): string {
  if (v === undefined && !required) return "";
  if (typeof v !== "string" || (required && v === "")) throw invalidArgument(field, required ? "must be a non-empty string" : "must be a string");
  if (v.length > maxTemplateChars) throw invalidArgument(field, `longer than ${String(maxTemplateChars)} characters`);
  return v;
}

function parseTemplate(v: unknown, field: string): PromptTemplate {
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw invalidArgument(field, "must be a map with message (and optionally prefix, generation)");
  const r = v as Record<string, unknown>;
  for (const k of Object.keys(r)) if (!templateFields.includes(k)) throw invalidArgument(`${field}.${k}`, `unknown field (allowed: ${templateFields.join(", ")})`);
  return { message: part(r["message"], `${field}.message`, true), prefix: part(r["prefix"], `${field}.prefix`, false), generation: part(r["generation"], `${field}.generation`, false) };
}

/** The `promptTemplate` of each raw model entry that has one, by model id (the entries are validated otherwise by the config parser). */
export function parsePromptTemplates(rawModels: readonly unknown[]): Readonly<Record<string, PromptTemplate>> {
  const out: Record<string, PromptTemplate> = {};
  rawModels.forEach((m, i) => {
    if (typeof m !== "object" || m === null) return;
    const r = m as Record<string, unknown>;
    if (r["promptTemplate"] === undefined || typeof r["id"] !== "string") return;
    out[r["id"]] = parseTemplate(r["promptTemplate"], `models[${String(i)}].promptTemplate`);
  });
  return out;
}

/** One chat message as a template sees it. */
export interface TemplateMessage {
  readonly role: string;
  readonly content: string;
  readonly name: string;
}

/** The prompt for `messages` under `t` (one pass; placeholders in the content itself are not expanded). */
export function renderPrompt(t: PromptTemplate, messages: readonly TemplateMessage[]): string {
  const parts: string[] = [t.prefix];
  for (const m of messages) {
    parts.push(t.message.replace(/\{\{(role|content|name)\}\}/g, (_, k: string) => (k === "role" ? m.role : k === "content" ? m.content : m.name)));
  }
  parts.push(t.generation);
  return parts.join("");
}
