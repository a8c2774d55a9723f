import { hostname } from "node:os";
import type { HaConfig } from "./ha-config.js";

/** The first part of this member's lease holder name: the configured one, else the host's name made safe for a KV key. */
export function holderPrefix(ha: HaConfig): string {
  return ha.holder ?? (hostname().replace(/[^A-Za-z0-9_-]/g, "-").slice(0, 64) || "coordinator");
}
