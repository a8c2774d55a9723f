/**
 * Drives ≥ 10 000 generated hostile requests at one gRPC surface over a real
 * loopback connection (fast-check property, 50 requests in flight per run),
 * checking that every answer is a clear status and that what the surface
 * serves afterwards equals what it served before.
 */
import fc from "fast-check";
import { expect } from "vitest";
import type { DescService } from "@bufbuild/protobuf";
import { fire, fuzzCase, millionElements, unclearAnswer, type FuzzCase, type Postfixes } from "./grpc-fuzz.js";
import { RawGrpc, type RawOutcome } from "./raw-grpc.js";

export const casesPerRun = 50;
export const runsPerSurface = 200;

export interface SurfaceResult {
  readonly cases: number;
  /** Answers by grpc-status ("cancelled" for streams this client cancelled after a reply). */
  readonly byStatus: Readonly<Record<string, number>>;
}

function describeCase(c: FuzzCase): string {
  const hex = c.body.subarray(0, 96).toString("hex");
  return `${c.method.parent.typeName}/${c.method.name} (${c.kind}, ${String(c.body.length)} bytes): ${hex}${c.body.length > 96 ? "…" : ""}`;
}

/** Fuzzes `svc` at `address`; fails naming the first request that got no clear status. */
export async function fuzzSurface(address: string, svc: DescService, postfixes: Postfixes = {}, seed?: number): Promise<SurfaceResult> {
  const raw = new RawGrpc(address);
  const byStatus: Record<string, number> = {};
  let cases = 0;
  try {
    await fc.assert(
      fc.asyncProperty(fc.array(fuzzCase(svc, postfixes), { minLength: casesPerRun, maxLength: casesPerRun }), async (batch) => {
        const outcomes = await fire(raw, batch);
        batch.forEach((c, i) => {
          const o = outcomes[i] as RawOutcome;
          const cancelled = c.method.methodKind === "server_streaming";
          const why = unclearAnswer(o, cancelled, c.kind === "bad-frame" && c.body.length >= 5 && (c.body[0] ?? 0) !== 0);
          if (why !== undefined) throw new Error(`${describeCase(c)} → ${why}`);
          const key = o.status === undefined ? "cancelled" : String(o.status);
          byStatus[key] = (byStatus[key] ?? 0) + 1;
        });
        cases += batch.length;
      }),
      { numRuns: runsPerSurface, ...(seed === undefined ? {} : { seed }), endOnFailure: true },
    );
  } finally {
    raw.close();
  }
  return { cases, byStatus };
}

/**
 * Every method of `svc` whose input has a repeated field, sent that field
 * 10^6 times (about 2 MB): refused RESOURCE_EXHAUSTED before decoding (or
 * as `refusedWith` says, for a pass-through route that never decodes).
 */
export async function millionElementBurst(address: string, svc: DescService, refusedWith: readonly number[] = [8]): Promise<string[]> {
  const raw = new RawGrpc(address);
  const tried: string[] = [];
  try {
    for (const m of svc.methods) {
      const body = millionElements(m);
      if (body === undefined) continue;
      const o = await raw.call(`/${svc.typeName}/${m.name}`, body, { timeoutMs: 60_000 });
      expect({ method: m.name, status: o.status }).toEqual({ method: m.name, status: expect.toBeOneOf([...refusedWith]) });
      tried.push(m.name);
    }
  } finally {
    raw.close();
  }
  return tried;
}
