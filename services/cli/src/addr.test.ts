import { describe, expect, it } from "vitest";
import { Code, WardenError } from "@warden/common";
import { NodeSchema } from "@warden/proto";
import { create } from "@bufbuild/protobuf";
import { parseAddr } from "./addr.js";
import { nodesTable, versionWarning } from "./render.js";

function rejects(value: string): WardenError {
  try {
    parseAddr(value, "--addr");
  } catch (err) {
    if (err instanceof WardenError) return err;
    throw err;
  }
  throw new Error(`accepted "${value}"`);
}

describe("parseAddr", () => {
  it("accepts host:port, names and bracketed IPv6", () => {
    expect(parseAddr("127.0.0.1:50051", "--addr")).toEqual({ host: "127.0.0.1", port: 50051 });
    expect(parseAddr("coordinator.example:1", "--addr")).toEqual({ host: "coordinator.example", port: 1 });
    expect(parseAddr("[::1]:7443", "--listen")).toEqual({ host: "::1", port: 7443 });
  });

  it("refuses a port out of range, a URL, a missing or non-numeric port, naming the flag", () => {
    const out = rejects("127.0.0.1:99999");
    expect(out.code).toBe(Code.InvalidArgument);
    expect(out.rawMessage).toMatch(/^--addr: port 99999 is out of range/);
    expect(rejects("http://127.0.0.1:50051").rawMessage).toContain('try "127.0.0.1:50051"');
    expect(rejects("127.0.0.1").rawMessage).toContain("expected host:port");
    expect(rejects("127.0.0.1:abc").rawMessage).toContain('got "abc"');
    expect(rejects("::1:80").rawMessage).toContain("brackets");
    expect(rejects("x".repeat(301)).rawMessage).toContain("at most 300");
  });
});

describe("nodes table versions", () => {
  const node = (nodeId: string, version: string) => create(NodeSchema, { nodeId, version });

  it("warns when agents differ from each other or from this CLI, and not when all match", () => {
    expect(versionWarning([node("a", "0.1.0"), node("b", "0.1.0")], "0.1.0")).toBeUndefined();
    expect(versionWarning([node("a", "0.1.0"), node("b", "0.0.9")], "0.1.0")).toContain("b=0.0.9");
    expect(versionWarning([node("a", "")], "0.1.0")).toContain("a=unknown");
    expect(versionWarning([node("a", "0.2.0")], "0.1.0")).toContain("this CLI is 0.1.0");
  });

  it("shows a VERSION column", () => {
    const t = nodesTable([node("gpu-a", "0.0.9")]);
    expect(t).toContain("VERSION");
    expect(t).toContain("0.0.9");
    expect(t).toContain("warning:");
  });
});
