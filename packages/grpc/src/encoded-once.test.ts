import { describe, expect, it } from "vitest";
import { create, toBinary } from "@bufbuild/protobuf";
import { HeartbeatResponseSchema, NodeService } from "@warden/proto";
import { encodedOnce, encodingOf } from "./encoded-once.js";
import { methodDefinition } from "./service-definition.js";

describe("encodedOnce", () => {
  it("is sent as the bytes made with it, which are the message's encoding; other values are encoded per send", () => {
    const init = { coordinatorEpoch: 9n, leaderEpoch: 2n, fullInventoryRequired: true };
    const wire = Buffer.from(toBinary(HeartbeatResponseSchema, create(HeartbeatResponseSchema, init)));
    const once = encodedOnce(HeartbeatResponseSchema, init);
    const serialize = methodDefinition(NodeService.method.heartbeat).responseSerialize;
    expect(serialize(once)).toBe(encodingOf(once));
    expect(Buffer.from(serialize(once))).toEqual(wire);
    // An equal message made otherwise has no encoding of its own: encoded as ever, to the same bytes.
    const plain = create(HeartbeatResponseSchema, init);
    expect(encodingOf(plain)).toBeUndefined();
    expect(Buffer.from(serialize(plain))).toEqual(wire);
    expect(Buffer.from(serialize(init))).toEqual(wire);
  });

  it("freezes the message, so its fields cannot drift from its bytes", () => {
    const once = encodedOnce(HeartbeatResponseSchema, { leaderEpoch: 1n });
    expect(() => {
      (once as { leaderEpoch: bigint }).leaderEpoch = 5n;
    }).toThrow(TypeError);
    expect(once.leaderEpoch).toBe(1n);
  });
});
