import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { createLogger } from "./logger.js";

function capture(): { stream: Writable; lines: string[] } {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, cb) {
      lines.push(...chunk.toString("utf8").split("\n").filter((l) => l !== ""));
      cb();
    },
  });
  return { stream, lines };
}

describe("createLogger", () => {
  it("writes each key once on a line when children nest the same binding (strict JSON pipelines reject repeats)", () => {
    const { stream, lines } = capture();
    const log = createLogger({ name: "coordinator", destination: stream });
    log.child({ component: "embedded-agent", nodeId: "local" }).child({ component: "agent", pid: 7 }).info("backend transition", { from: "ready" });
    expect(lines).toHaveLength(1);
    const line = lines[0] ?? "";
    expect(line.match(/"component"/g)).toHaveLength(1);
    expect(line.match(/"nodeId"/g)).toHaveLength(1);
    const o = JSON.parse(line) as Record<string, unknown>;
    expect(o).toMatchObject({ name: "coordinator", component: "embedded-agent/agent", nodeId: "local", pid: 7, from: "ready", msg: "backend transition" });
  });

  it("a later child's binding replaces an earlier one of the same key", () => {
    const { stream, lines } = capture();
    createLogger({ name: "x", destination: stream }).child({ model: "a" }).child({ model: "b" }).warn("w");
    expect(lines[0]?.match(/"model"/g)).toHaveLength(1);
    expect(JSON.parse(lines[0] ?? "{}")).toMatchObject({ model: "b", level: 40 });
  });
});
