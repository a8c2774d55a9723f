import { invalidArgument } from "@warden/common";
import { describeValue } from "./describe-value.js";

function hasControlChars(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c === 0x7f) return true;
  }
  return false;
}

/** A name from outside (node, model, incarnation, address): 1..`maxLength` printable characters, else INVALID_ARGUMENT naming `field`. */
export function checkName(field: string, v: unknown, maxLength: number): string {
  if (typeof v !== "string" || v.length === 0 || v.length > maxLength || hasControlChars(v)) {
    throw invalidArgument(field, `must be 1..${maxLength} printable characters`);
  }
  return v;
}

/** A memory estimate: absent means unknown (0). */
export function checkSize(v: unknown): number {
  if (v === undefined) return 0;
  if (typeof v !== "number" || !Number.isFinite(v) || v < 0) throw invalidArgument("sizeBytes", `must be a finite number >= 0, got ${describeValue(v)}`);
  return v;
}

export function checkGpu(v: unknown): number | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0) throw invalidArgument("gpu", `must be an integer >= 0, got ${describeValue(v)}`);
  return v;
}
