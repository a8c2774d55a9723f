import { defineConfig } from "vitest/config";

// Two projects: everything ordinary first, then the heavy property/simulation
// suites (files named *.heavy.test.ts) so they do not compete for the two cores
// with process-spawning integration tests. test/run-tests.ts runs them in order.
const all = [
  "packages/*/src/**/*.test.ts",
  "services/*/src/**/*.test.ts",
  "test/**/*.test.ts",
];

export default defineConfig({
  test: {
    // Hang detectors, not timing assertions: a process test that takes 50–60 s on a loaded
    // 2-core machine must not fail for it (cluster-node-lost did, with the default 60 s).
    testTimeout: 180_000,
    hookTimeout: 120_000,
    teardownTimeout: 30_000,
    pool: "forks",
    projects: [
      {
        extends: true,
        // Two files at a time: most of these wait on child processes, timers and sockets, not
        // the CPU (vitest's default on 2 cores is one). Measured under heavy load: 1 197 s
        // instead of 1 628 s, all passing. Each worker has its own test-port slice.
        test: { name: "main", include: all, exclude: ["**/*.heavy.test.ts", "**/node_modules/**"], maxWorkers: 2 },
      },
      {
        extends: true,
        // Two at a time as well: these are CPU-bound with no deadlines that a busy core could
        // miss, and alone after the main project they would leave one of the two cores idle.
        test: { name: "heavy", include: all.map((p) => p.replace(".test.ts", ".heavy.test.ts")), maxWorkers: 2 },
      },
    ],
  },
});
