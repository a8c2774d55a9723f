import { invalidArgument } from "@warden/common";
import { defaultMaxMessageBytes } from "@warden/grpc";

/**
 * backend-sim's message limit both ways: LocalAI's 50 MiB unless
 * BACKEND_SIM_MAX_MESSAGE_BYTES says otherwise (an environment knob rather than a
 * flag: upstream backends take `--addr` alone, and so does the simulator).
 */
export function simMaxMessageBytes(env: Readonly<Record<string, string | undefined>>): number {
  const v = env["BACKEND_SIM_MAX_MESSAGE_BYTES"];
  if (v === undefined || v === "") return defaultMaxMessageBytes;
  const n = Number(v);
  if (!/^\d+$/.test(v) || n < 1024 || n > 2 ** 31 - 1) throw invalidArgument("BACKEND_SIM_MAX_MESSAGE_BYTES", `must be an integer in [1024, ${String(2 ** 31 - 1)}], got ${JSON.stringify(v)}`);
  return n;
}
