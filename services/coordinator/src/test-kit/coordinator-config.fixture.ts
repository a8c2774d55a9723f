import { Code, isWardenError } from "@warden/common";
import { parseCoordinatorConfig } from "../config/coordinator-config.js";

/** The INVALID_ARGUMENT message a config is refused with, or "accepted". */
export function errorOf(yaml: string): string {
  try {
    parseCoordinatorConfig(yaml);
  } catch (err) {
    if (isWardenError(err, Code.InvalidArgument)) return err.rawMessage;
    throw err;
  }
  return "accepted";
}

/** A config with one model `m` on backend `sim`, plus `extra` lines of that model. */
export const model = (extra: string): string => `models:\n  - id: m\n    backend: sim\n${extra}`;
