import { describe, expect, it } from "vitest";
import { parseBackendRecord } from "./backend-record.js";

const complete = { version: 1, incarnation: "01J0000000000000000000000A", model: "m", backend: "sim", address: "127.0.0.1:40000", pid: 42, pidStartTime: "123", gpuDevice: "0", startedAtMs: 5, phase: "ready", loadDigest: "0123456789abcdef", stopRequested: { incarnation: "01J0000000000000000000000A", reason: "idle", atMs: 9 } };

describe("backend records", () => {
  it("accepts a complete record", () => {
    expect(parseBackendRecord("a.json", JSON.stringify(complete))).toEqual({ kind: "complete", record: complete });
  });

  it("reads the load digest; a record written before it existed (or with a bad one) has none", () => {
    const { loadDigest: _, ...older } = complete;
    expect(parseBackendRecord("f.json", JSON.stringify(older))).toEqual({ kind: "complete", record: { ...complete, loadDigest: "" } });
    expect(parseBackendRecord("g.json", JSON.stringify({ ...complete, loadDigest: "x".repeat(65) }))).toMatchObject({ kind: "complete", record: { loadDigest: "" } });
  });

  it("reads the bundle digest it was started from; none when absent or not a sha256", () => {
    const sha = "ab".repeat(32);
    expect(parseBackendRecord("h.json", JSON.stringify({ ...complete, bundleDigest: sha }))).toEqual({ kind: "complete", record: { ...complete, bundleDigest: sha } });
    expect(parseBackendRecord("i.json", JSON.stringify({ ...complete, bundleDigest: "AB".repeat(32) }))).toEqual({ kind: "complete", record: complete });
  });

  it("treats anything incomplete as partial, keeping what it can read", () => {
    expect(parseBackendRecord("b.json", JSON.stringify({ ...complete, incarnation: undefined }))).toMatchObject({ kind: "partial", partial: { pid: 42, model: "m", detail: "record missing incarnation" } });
    expect(parseBackendRecord("c.json", JSON.stringify({ ...complete, pidStartTime: undefined }))).toMatchObject({ kind: "partial", partial: { detail: "record missing pid start time" } });
    expect(parseBackendRecord("d.json", "{not json")).toMatchObject({ kind: "partial", partial: { pid: undefined, detail: "record is not valid JSON" } });
    expect(parseBackendRecord("e.json", JSON.stringify({ ...complete, pid: -1 }))).toMatchObject({ kind: "partial", partial: { pid: undefined } });
  });
});
