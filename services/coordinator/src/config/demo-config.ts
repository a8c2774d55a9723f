import type { CoordinatorConfig } from "./coordinator-config.js";
import { resolveCoordinatorConfig } from "./coordinator-config.js";

/**
 * The built-in single-machine demo (`npm start` / `warden up` without a
 * config): three backend-sim models on the embedded agent — `chat-small` and
 * `chat-large` share the `chat` group (so loading one evicts the other),
 * `embed` is pinned — with an idle timeout short enough to watch.
 */
export function demoConfig(overrides: { listen?: string; stateDir?: string } = {}): CoordinatorConfig {
  return resolveCoordinatorConfig({
    listen: overrides.listen ?? "127.0.0.1:50051",
    stateDir: overrides.stateDir ?? ".warden",
    policy: { limitPerNode: 3, idleCheck: true, idleTimeout: "2m", busyCheck: true, busyTimeout: "5m" },
    stop: { timeout: "10s" },
    models: [
      { id: "chat-small", backend: "backend-sim", groups: ["chat"], memoryEstimate: "2GiB", options: ["sim.load_delay_ms:300", "sim.predict_tokens:12", "sim.predict_delay_ms:40"] },
      { id: "chat-large", backend: "backend-sim", groups: ["chat"], memoryEstimate: "6GiB", options: ["sim.load_delay_ms:1200", "sim.predict_tokens:24", "sim.predict_delay_ms:60"] },
      { id: "embed", backend: "backend-sim", pinned: true, memoryEstimate: "1GiB", options: ["sim.load_delay_ms:200", "sim.predict_tokens:4"] },
    ],
  });
}
