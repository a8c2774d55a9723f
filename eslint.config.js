// @ts-check
import js from "@eslint/js";
import tseslint from "typescript-eslint";

// Decision packages run unmodified inside the seeded simulation: they must not
// reach for real time, real randomness, timers or the network.
const decisionPackages = [
  "packages/watchdog/src/**/*.ts",
  "packages/loader/src/**/*.ts",
  "packages/cluster/src/**/*.ts",
  "packages/placement/src/**/*.ts",
  "packages/node-health/src/**/*.ts",
  "packages/reconciler/src/**/*.ts",
  "packages/outbox/src/**/*.ts",
  "packages/events/src/**/*.ts",
  "packages/lease/src/**/*.ts",
  "packages/admission/src/**/*.ts",
  "packages/routing-affinity/src/**/*.ts",
];

// nats.js's connect resets the process-wide transport factory to its unguarded transport (see guarded-node-transport.ts).
const natsConnect = { name: "@nats-io/transport-node", importNames: ["connect"], message: "Connect with connectAudit (@warden/audit): it uses the transport that survives a server dying mid-write." };
// Planted bugs (packages/common/src/planted-bugs.ts) are switched on by the simulation's tests only: production code never reaches the switch.
const plantedBugSwitch = { name: "@warden/common/testing/planted-bugs", message: "Only tests and test/sim may plant bugs." };
const plantedBugSwitchPattern = { group: ["**/testing/planted-bugs*", "**/common/src/planted-bugs*"], message: "Only tests and test/sim may plant bugs." };

export default tseslint.config(
  { ignores: ["**/node_modules/**", "packages/proto/src/gen/**", "**/dist/**", "services/cli/bin/**"] },
  js.configs.recommended,
  ...tseslint.configs.strictTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      "@typescript-eslint/no-floating-promises": "error",
      "@typescript-eslint/switch-exhaustiveness-check": ["error", { considerDefaultExhaustiveForUnions: true }],
      "@typescript-eslint/consistent-type-imports": "error",
      "@typescript-eslint/restrict-template-expressions": ["error", { allowNumber: true, allowBoolean: true }],
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "@typescript-eslint/no-empty-function": "off",
      // Handlers implement Promise-returning interfaces; an await-free body is fine.
      "@typescript-eslint/require-await": "off",
      "@typescript-eslint/no-this-alias": ["error", { allowedNames: ["self"] }],
      "@typescript-eslint/no-extraneous-class": "off",
      "no-restricted-syntax": ["error", { selector: "ExportDefaultDeclaration", message: "Use named exports." }],
      "no-restricted-imports": [
        "error",
        { paths: [natsConnect, plantedBugSwitch], patterns: [plantedBugSwitchPattern] },
      ],
    },
  },
  {
    files: decisionPackages,
    ignores: ["**/*.test.ts"],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          paths: [
            { name: "@grpc/grpc-js", message: "Decision packages take ports; the gRPC wiring lives in services/." },
            { name: "node:timers", message: "Use the injected Clock." },
            { name: "node:timers/promises", message: "Use the injected Clock." },
            { name: "timers", message: "Use the injected Clock." },
            { name: "pino", message: "Decision packages do not log; return decisions instead." },
            { name: "node:fs", message: "Decision packages do no I/O; take a port." },
            { name: "node:child_process", message: "Decision packages do no I/O; take a port." },
            natsConnect,
            plantedBugSwitch,
          ],
          patterns: [{ group: ["@grpc/*"], message: "Decision packages take ports." }, plantedBugSwitchPattern],
        },
      ],
      "no-restricted-globals": [
        "error",
        { name: "setTimeout", message: "Use the injected Clock." },
        { name: "setInterval", message: "Use the injected Clock." },
        { name: "setImmediate", message: "Use the injected Clock." },
        { name: "clearTimeout", message: "Use the injected Clock." },
        { name: "performance", message: "Use the injected Clock." },
      ],
      "no-restricted-properties": [
        "error",
        { object: "Date", property: "now", message: "Use the injected Clock." },
        { object: "Math", property: "random", message: "Use the injected Rng." },
        { object: "globalThis", property: "setTimeout", message: "Use the injected Clock." },
        { object: "process", property: "hrtime", message: "Use the injected Clock." },
      ],
    },
  },
  {
    files: ["**/*.test.ts", "test/**/*.ts"],
    rules: {
      "@typescript-eslint/no-non-null-assertion": "off",
      "@typescript-eslint/no-unsafe-assignment": "off",
      "@typescript-eslint/no-unsafe-member-access": "off",
    },
  },
  // Tests (and the simulation that runs them) are the only code that may plant a bug.
  {
    files: ["**/*.test.ts", "test/sim/**/*.ts"],
    rules: { "no-restricted-imports": ["error", { paths: [natsConnect] }] },
  },
  // Tool config files are the one place a framework forces a default export.
  { files: ["eslint.config.js", "vitest.config.ts"], rules: { "no-restricted-syntax": "off" } },
  { files: ["eslint.config.js"], ...tseslint.configs.disableTypeChecked },
  // The build scripts are plain JavaScript (they run before anything is built, without a TypeScript loader).
  { files: ["services/cli/build/**/*.mjs", "services/coordinator/src/http/dashboard/client/*.mjs"], ...tseslint.configs.disableTypeChecked },
);
