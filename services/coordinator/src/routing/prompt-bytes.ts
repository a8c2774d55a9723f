import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import type { PromptParts } from "./prefix-routing.js";

/**
 * The prompt of an encoded `backend.PredictOptions`, read without decoding
 * the message: prefix routing on the pass-through paths (the data plane's
 * Predict bytes, `backend.Backend` Predict and PredictStream) needs only the
 * first `maxChars` characters of `Prompt`, else of the rendered `Messages`.
 * Field numbers: proto/backend/backend.proto.
 */
const promptField = 1;
const messagesField = 44;
const messageRoleField = 1;
const messageContentField = 2;

// Non-fatal: a prompt that is not UTF-8 is the backend's to refuse; routing hashes what it reads.
const utf8 = new TextDecoder("utf-8", { fatal: false });

/**
 * At most `maxChars` UTF-16 units' worth of a UTF-8 string field: every
 * complete character of at most 3 bytes is at least one unit (4 bytes make
 * two), so `3 × maxChars + 3` bytes hold the first `maxChars` units as the
 * whole string's decode has them — the cut, where a character may be split,
 * lies beyond them.
 */
function boundedString(bytes: Uint8Array, maxChars: number): string {
  const maxBytes = 3 * maxChars + 3;
  return utf8.decode(bytes.length <= maxBytes ? bytes : bytes.subarray(0, maxBytes));
}

function readMessage(bytes: Uint8Array, maxChars: number): { role: string; content: string } {
  const r = new BinaryReader(bytes);
  let role = "";
  let content = "";
  while (r.pos < r.len) {
    const [field, wire] = r.tag();
    if (field === messageRoleField && wire === WireType.LengthDelimited) role = boundedString(r.bytes(), maxChars);
    else if (field === messageContentField && wire === WireType.LengthDelimited) content = boundedString(r.bytes(), maxChars);
    else r.skip(wire, field);
  }
  return { role, content };
}

/**
 * The parts of `options` prefix routing reads (promptText in
 * prefix-routing.ts), each cut so that their rendering's first `maxChars`
 * characters equal those of the fully decoded message's: `Prompt` (the last
 * occurrence, as protobuf merges a singular field), else `Messages` in order
 * until their rendering passes `maxChars`. The walk reads field tags and
 * lengths only; the strings decoded are bounded by `maxChars`. Bytes that are
 * not wire format give undefined (no hint: the call routes least in flight,
 * and the backend refuses the request).
 */
export function promptOfOptions(options: Uint8Array, maxChars: number): PromptParts | undefined {
  const r = new BinaryReader(options);
  let prompt: Uint8Array | undefined;
  const messages: Uint8Array[] = [];
  try {
    while (r.pos < r.len) {
      const [field, wire] = r.tag();
      if (field === promptField && wire === WireType.LengthDelimited) prompt = r.bytes();
      else if (field === messagesField && wire === WireType.LengthDelimited) messages.push(r.bytes());
      else r.skip(wire, field);
    }
    if (prompt !== undefined && prompt.length > 0) return { Prompt: boundedString(prompt, maxChars) };
    const out: { role: string; content: string }[] = [];
    // Each rendered message adds its role and content plus separators; past maxChars the rest cannot change the hashed part.
    let rendered = 0;
    for (const m of messages) {
      if (rendered >= maxChars) break;
      const msg = readMessage(m, maxChars - rendered);
      out.push(msg);
      rendered += msg.role.length + msg.content.length;
    }
    return { Messages: out };
  } catch {
    return undefined;
  }
}
