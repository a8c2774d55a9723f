/**
 * The adapter's unary round trip against a plain grpc-js generic client on
 * the same server, sequential and 64 in flight.
 */
import { makeGenericClientConstructor, credentials, Metadata, type ServiceError } from "@grpc/grpc-js";
import { Backend, type Reply } from "@warden/proto";
import { GrpcServer, createClient, withUnimplemented, grpcServiceDefinition } from "@warden/grpc";
import type { BenchResult } from "./bench-result.js";

async function callsPerSecond(durationMs: number, concurrency: number, call: () => Promise<unknown>): Promise<number> {
  const end = performance.now() + durationMs;
  let n = 0;
  const worker = async (): Promise<void> => {
    while (performance.now() < end) {
      await call();
      n++;
    }
  };
  const start = performance.now();
  await Promise.all(Array.from({ length: concurrency }, worker));
  return n / ((performance.now() - start) / 1000);
}

export async function run(): Promise<BenchResult[]> {
  const server = new GrpcServer();
  server.add(Backend, withUnimplemented(Backend, {
    health: async () => ({ message: new Uint8Array([79, 75]) }),
    loadModel: async () => ({ success: true }),
    predict: async (req) => ({ message: new TextEncoder().encode(req.Prompt) }),
    predictStream: async function* () {},
    free: async () => ({ success: true }),
    status: async () => ({}),
  }));
  const { address } = await server.listen("127.0.0.1:0");
  const ours = createClient(Backend, address);
  const Plain = makeGenericClientConstructor(grpcServiceDefinition(Backend), "Backend");
  const plain = new Plain(address, credentials.createInsecure()) as unknown as {
    predict(req: object, md: Metadata, cb: (err: ServiceError | null, res?: Reply) => void): void;
    close(): void;
  };
  const plainCall = (): Promise<unknown> =>
    new Promise((resolve, reject) => {
      plain.predict({ Prompt: "hi" }, new Metadata(), (err, res) => {
        if (err !== null) reject(err);
        else resolve(res);
      });
    });
  const oursCall = (): Promise<unknown> => ours.predict({ Prompt: "hi" });
  // warm both up
  await callsPerSecond(300, 8, oursCall);
  await callsPerSecond(300, 8, plainCall);
  const results: BenchResult[] = [];
  for (const concurrency of [1, 64]) {
    const b = await callsPerSecond(2000, concurrency, plainCall);
    const o = await callsPerSecond(2000, concurrency, oursCall);
    results.push({ name: `unary round trip, ${String(concurrency)} in flight`, baseline: "plain grpc-js generic client", ours: o, baselineValue: b, unit: "calls/s", higherIsBetter: true });
  }
  ours.close();
  plain.close();
  await server.shutdown(500);
  return results;
}
