import { describe, expect, it } from "vitest";
import { Code, WardenError } from "@warden/common";
import { create, toBinary } from "@bufbuild/protobuf";
import { HeartbeatRequestSchema, type HeartbeatRequest } from "@warden/proto";
import { EncodedRequest, type HandlerContext, type RequestBytes } from "@warden/grpc";
import { heartbeatStream } from "./heartbeat-stream.js";
import { TurnBudget } from "./turn-budget.js";

/** A heartbeat as the server hands it over: its bytes (GrpcServer's encodedRequests). */
function encoded(sequence: number): EncodedRequest<HeartbeatRequest> {
  return new EncodedRequest(HeartbeatRequestSchema, toBinary(HeartbeatRequestSchema, create(HeartbeatRequestSchema, { nodeId: "a", bootEpoch: 7n, sequence: BigInt(sequence) })));
}

/** Heartbeats that are all there at once: the stream answers them in one chain of microtasks unless something cuts it. */
async function* queued(n: number): AsyncIterable<RequestBytes<HeartbeatRequest>> {
  for (let i = 0; i < n; i++) yield encoded(i + 1);
}

/**
 * Answers `n` queued heartbeats, each "costing" 1 ms of a fake clock; returns after which heartbeat a
 * macrotask queued before them ran (a setImmediate: the first thing the event loop runs once the chain lets it).
 */
async function run(n: number, budget: TurnBudget | undefined, clock: { ms: number }): Promise<{ answered: bigint[]; timerAfter: number }> {
  const answered: bigint[] = [];
  let timerAfter = -1;
  setImmediate(() => (timerAfter = answered.length));
  const ctx = { signal: new AbortController().signal, peer: "127.0.0.1:1" } as HandlerContext;
  const beat = (req: HeartbeatRequest) => {
    clock.ms += 1;
    answered.push(req.sequence);
    return {};
  };
  for await (const _ of heartbeatStream(queued(n), ctx, { boundNodeOf: () => undefined, beat, ...(budget === undefined ? {} : { budget }) })) {
    // answered
  }
  await new Promise((r) => setImmediate(r));
  return { answered, timerAfter };
}

describe("TurnBudget", () => {
  it("cuts a long run of heartbeats into turns of the budget, letting the event loop in, answering every one in order", async () => {
    const clock = { ms: 0 };
    const budget = new TurnBudget({ budgetMs: 10, nowMs: () => clock.ms });
    const { answered, timerAfter } = await run(100, budget, clock);
    expect(answered).toEqual(Array.from({ length: 100 }, (_, i) => BigInt(i + 1)));
    expect(timerAfter).toBeGreaterThan(0);
    expect(timerAfter).toBeLessThan(100);
    expect(budget.deferredTurns).toBeGreaterThanOrEqual(9);
  });

  it("without a budget the same heartbeats run as one chain nothing else can enter", async () => {
    const clock = { ms: 0 };
    const { answered, timerAfter } = await run(100, undefined, clock);
    expect(answered).toHaveLength(100);
    expect(timerAfter).toBe(100);
  });

  it("charges the work run through it, not the time between: a turn ends once its work spent the budget, and the next starts afresh", async () => {
    let ms = 0;
    const budget = new TurnBudget({ budgetMs: 10, nowMs: () => ms });
    for (let i = 0; i < 10; i++) {
      expect(budget.has()).toBe(true);
      // Reading and writing the streams between heartbeats (2 ms each time) is not the heartbeats' work.
      ms += 2;
      expect(budget.run(() => (ms += 1))).toBe(ms);
    }
    expect(budget.has()).toBe(false);
    const order: string[] = [];
    budget.defer(() => order.push(`first, budget left: ${String(budget.has())}`));
    budget.defer(() => order.push("second"));
    expect(order).toEqual([]);
    await new Promise((r) => setImmediate(r));
    expect(order).toEqual(["first, budget left: true", "second"]);
    expect(budget.deferredTurns).toBe(1);
    expect(budget.waiting).toBe(0);
  });

  it("charges work that throws as well", async () => {
    let ms = 0;
    const budget = new TurnBudget({ budgetMs: 10, nowMs: () => ms });
    expect(budget.has()).toBe(true);
    expect(() =>
      budget.run(() => {
        ms += 11;
        throw new Error("refused");
      }),
    ).toThrow("refused");
    expect(budget.has()).toBe(false);
  });

  it("resumes the deferred in order, only as many a turn as its budget runs: a backlog is not woken each turn", async () => {
    let ms = 0;
    const budget = new TurnBudget({ budgetMs: 10, nowMs: () => ms });
    // 2 000 streams, one heartbeat each, all read while one turn's budget is already spent.
    expect(budget.has()).toBe(true);
    budget.run(() => (ms += 10));
    const streams = 2_000;
    const applied: number[] = [];
    const perTurn = new Map<number, number>();
    let turn = -1;
    const apply = (i: number): void => {
      if (!budget.has()) {
        budget.defer(() => {
          apply(i);
        });
        return;
      }
      budget.run(() => (ms += 1)); // 1 ms each: 10 a turn
      applied.push(i);
      perTurn.set(turn, (perTurn.get(turn) ?? 0) + 1);
    };
    for (let i = 0; i < streams; i++) apply(i);
    expect(budget.waiting).toBe(streams);
    while (applied.length < streams) {
      turn++;
      await new Promise((r) => setImmediate(r));
    }
    expect(applied).toEqual(Array.from({ length: streams }, (_, i) => i));
    // Each deferral resumed exactly once: no waiter woken only to wait again.
    expect(budget.resumed).toBe(streams);
    expect(Math.max(...perTurn.values())).toBe(10);
    expect(budget.waiting).toBe(0);
  });
});

describe("a heartbeat waiting for its turn", () => {
  it("is not applied when the stream ends or is revoked while it waits", async () => {
    let ms = 0;
    const budget = new TurnBudget({ budgetMs: 10, nowMs: () => ms });
    const ctl = new AbortController();
    const ctx = { signal: ctl.signal, peer: "127.0.0.1:1" } as HandlerContext;
    const applied: bigint[] = [];
    const beat = (req: HeartbeatRequest) => {
      ms += 6; // two heartbeats spend this turn's budget
      applied.push(req.sequence);
      return {};
    };
    // Revoked once the third has been read and waits for the next turn: right after it starts to wait, before that turn.
    const held: string[] = [];
    const arrived = (): void => {
      held.push("arrived");
      queueMicrotask(() => { ctl.abort(new Error("revoked")); });
    };
    const released = (): void => {
      held.push("released");
    };
    const out: unknown[] = [];
    await expect(
      (async () => {
        for await (const r of heartbeatStream(queued(5), ctx, { boundNodeOf: () => undefined, beat, budget, arrived, released })) out.push(r);
      })(),
    ).rejects.toThrow("revoked");
    expect(applied).toEqual([1n, 2n]);
    // Its node is released when that turn comes, though nothing of it is applied.
    await new Promise((r) => setImmediate(r));
    expect(held).toEqual(["arrived", "released"]);
  });

  it("marks its node heard when it starts to wait (the coordinator's backlog is not the node's silence); one applied within the budget does not", async () => {
    let ms = 0;
    const budget = new TurnBudget({ budgetMs: 10, nowMs: () => ms });
    const ctx = { signal: new AbortController().signal, peer: "127.0.0.1:1" } as HandlerContext;
    const events: string[] = [];
    const beat = (req: HeartbeatRequest) => {
      ms += 6; // two heartbeats spend a turn's budget
      events.push(`applied ${String(req.sequence)}`);
      return {};
    };
    const arrived = (nodeId: string, bootEpoch: bigint) => {
      events.push(`heard ${nodeId} of boot ${String(bootEpoch)}`);
    };
    const released = (nodeId: string, bootEpoch: bigint) => {
      events.push(`released ${nodeId} of boot ${String(bootEpoch)}`);
    };
    /** Says when it is decoded: a heartbeat that waits for its turn waits as its bytes. */
    async function* told(n: number): AsyncIterable<RequestBytes<HeartbeatRequest>> {
      for (let i = 1; i <= n; i++) {
        const bytes = encoded(i);
        yield {
          decode: () => {
            events.push(`decoded ${String(i)}`);
            return bytes.decode();
          },
        };
      }
    }
    for await (const _ of heartbeatStream(told(4), ctx, { boundNodeOf: () => undefined, beat, budget, arrived, released })) {
      // answered
    }
    expect(events).toEqual(["decoded 1", "applied 1", "decoded 2", "applied 2", "heard a of boot 7", "released a of boot 7", "decoded 3", "applied 3", "decoded 4", "applied 4"]);
  });

  it("decodes the first message of a stream that must wait when nothing was decoded on it yet, to hear its node", async () => {
    let ms = 0;
    const budget = new TurnBudget({ budgetMs: 10, nowMs: () => ms });
    // Another stream spent this turn's budget.
    expect(budget.has()).toBe(true);
    budget.run(() => (ms += 10));
    const ctx = { signal: new AbortController().signal, peer: "127.0.0.1:1" } as HandlerContext;
    const events: string[] = [];
    const beat = (req: HeartbeatRequest) => {
      events.push(`applied ${String(req.sequence)}`);
      return {};
    };
    const arrived = (nodeId: string, bootEpoch: bigint) => {
      events.push(`heard ${nodeId} of boot ${String(bootEpoch)}`);
    };
    for await (const _ of heartbeatStream(queued(1), ctx, { boundNodeOf: () => undefined, beat, budget, arrived })) {
      // answered
    }
    expect(events).toEqual(["heard a of boot 7", "applied 1"]);
  });

  it("bytes that are not a heartbeat end the stream INVALID_ARGUMENT naming request, in their turn, and apply nothing", async () => {
    const ctx = { signal: new AbortController().signal, peer: "127.0.0.1:1" } as HandlerContext;
    const applied: bigint[] = [];
    const beat = (req: HeartbeatRequest) => {
      applied.push(req.sequence);
      return {};
    };
    async function* withJunk(): AsyncIterable<RequestBytes<HeartbeatRequest>> {
      yield encoded(1);
      // Field 1 (node_id) as a varint: not a HeartbeatRequest.
      yield new EncodedRequest(HeartbeatRequestSchema, Uint8Array.of(0x08, 0x01, 0xff));
      yield encoded(3);
    }
    const budget = new TurnBudget({ budgetMs: 10, nowMs: () => 0 });
    const failure = await (async () => {
      for await (const _ of heartbeatStream(withJunk(), ctx, { boundNodeOf: () => undefined, beat, budget })) {
        // answered
      }
    })().then(
      () => undefined,
      (e: unknown) => WardenError.from(e),
    );
    expect({ code: failure?.code, field: failure?.details.field }).toEqual({ code: Code.InvalidArgument, field: "request" });
    expect(applied).toEqual([1n]);
  });

  it("checks each message once decoded, before it is applied: a refusal ends the stream and applies nothing of it", async () => {
    const ctx = { signal: new AbortController().signal, peer: "127.0.0.1:1" } as HandlerContext;
    const applied: bigint[] = [];
    const beat = (req: HeartbeatRequest) => {
      applied.push(req.sequence);
      return {};
    };
    const check = (req: HeartbeatRequest): void => {
      if (req.sequence === 2n) throw new WardenError(Code.PermissionDenied, "node_id: refused", { details: { field: "node_id" } });
    };
    const failure = await (async () => {
      for await (const _ of heartbeatStream(queued(3), ctx, { boundNodeOf: () => undefined, beat, check })) {
        // answered
      }
    })().then(
      () => undefined,
      (e: unknown) => WardenError.from(e),
    );
    expect(failure?.code).toBe(Code.PermissionDenied);
    expect(applied).toEqual([1n]);
  });
});
