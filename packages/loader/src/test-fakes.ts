/**
 * Hand-written fakes of the loader's ports for unit tests. Each records what
 * happened (into its own arrays and into one shared, ordered `log`) and
 * answers with a scripted behaviour the test can change at any time. Not
 * exported from the package index. The fakes live in files named after them;
 * this module gathers them so a test imports one place.
 */
export * from "./test-helpers.js";
export * from "./fake-agent.js";
export * from "./fake-ports.js";
export * from "./loader-harness.js";
