import { create, toBinary } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { NodeSchema } from "@warden/proto";
import type { NodeRecord } from "../nodes/node-registry.js";
import { nodeInit, nodeStateOf, type NodeInit } from "./admin-messages.js";
import type { NodeLimitFields } from "./replica-admin.js";

/** nodeInit as it was written before (spreads into the literal): the reference the faster one must equal. */
function nodeInitBefore(n: NodeRecord, instanceCount: number, drainRemaining: number, limits: NodeLimitFields, servingThroughOutage = 0): NodeInit {
  return {
    ...limits,
    servingThroughOutage,
    nodeId: n.nodeId,
    address: n.address,
    labels: n.labels,
    state: nodeStateOf(n),
    draining: n.draining,
    drainRemaining,
    ...(n.resources === undefined ? {} : { resources: n.resources }),
    lastHeartbeatAt: timestampFromMs(n.lastHeartbeatWallMs),
    bootEpoch: n.bootEpoch,
    instanceCount,
    embedded: n.embedded,
    foreign: n.foreign,
    version: n.version,
    backends: [...n.backends].sort(),
  };
}

const GiB = 1024 ** 3;
const id = fc.stringMatching(/^[a-z0-9-]{1,12}$/);
const record = fc.record({
  nodeId: id,
  address: fc.constantFrom("10.0.0.1:7000", "[::1]:7001"),
  labels: fc.dictionary(id, id, { maxKeys: 3 }),
  state: fc.constantFrom("ready" as const, "unreachable" as const, "lost" as const),
  inventory: fc.option(fc.constant([]), { nil: undefined }),
  draining: fc.boolean(),
  withResources: fc.boolean(),
  usedGiB: fc.nat(80),
  lastHeartbeatWallMs: fc.integer({ min: 0, max: 2 ** 42 }),
  bootEpoch: fc.bigInt({ min: 0n, max: 2n ** 40n }),
  embedded: fc.boolean(),
  foreign: fc.array(fc.record({ port: fc.integer({ min: 1, max: 65_535 }), pid: fc.nat(99_999), command: id }), { maxLength: 2 }),
  version: fc.constantFrom("", "0.9.0"),
  backends: fc.uniqueArray(id, { maxLength: 4 }),
});
const limits = fc.record({ max: fc.option(fc.integer({ min: 1, max: 1024 }), { nil: undefined }), budget: fc.option(fc.integer({ min: 1, max: 2 ** 40 }), { nil: undefined }) });

describe("nodeInit", () => {
  it("encodes every node as the version with spreads did (fast-check over random records, limits and counts)", () => {
    fc.assert(
      fc.property(record, limits, fc.nat(100), fc.nat(100), fc.nat(10), (r, l, count, drain, serving) => {
        const n = {
          ...r,
          backends: new Set(r.backends),
          resources: r.withResources ? { $typeName: "warden.v1.NodeResources", gpus: [{ $typeName: "warden.v1.GpuInfo", index: 0, name: "gpu", totalBytes: BigInt(80 * GiB), usedBytes: BigInt(r.usedGiB * GiB) }], ramTotalBytes: 1n, ramUsedBytes: 0n } : undefined,
        } as unknown as NodeRecord;
        const lim: NodeLimitFields = {
          agentLimits: l.max === undefined ? {} : { maxReplicasPerModel: l.max },
          limitsOverride: l.budget === undefined ? {} : { memoryBudget: { case: "memoryBudgetBytes", value: BigInt(l.budget) } },
          effectiveLimits: { maxReplicasPerModel: l.max ?? 4 },
        };
        const now = nodeInit(n, count, drain, lim, serving);
        const before = nodeInitBefore(n, count, drain, lim, serving);
        expect(toBinary(NodeSchema, create(NodeSchema, now))).toEqual(toBinary(NodeSchema, create(NodeSchema, before)));
        expect(now).toStrictEqual(before);
      }),
      { numRuns: 300, seed: 43 },
    );
  });
});
