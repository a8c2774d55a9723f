/**
 * What TLS costs: Predict through the coordinator with TLS on both hops
 * (caller → coordinator, coordinator → backend-sim serving TLS) against the
 * same with plaintext, in the same run: two `warden up` processes side by
 * side, measured in interleaved rounds (medians; the range of the rounds in
 * the row name). Goal: TLS costs at most 15 % of calls/s. 64 concurrent
 * callers over one connection each way, so handshakes are amortised, as for
 * a long-lived client; the cost measured is the record layer.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient, readCaBundle } from "@warden/grpc";
import { InferenceService } from "@warden/proto";
import { certsInit, certsIssue } from "../../services/cli/src/certs.js";
import { median, throughput, type BenchResult } from "./bench-result.js";
import { startBenchCoordinator } from "./bench-coordinator.js";

export async function run(): Promise<BenchResult[]> {
  const dir = await mkdtemp(join(tmpdir(), "warden-bench-tls-"));
  const certsDir = join(dir, "certs");
  await certsInit({ out: certsDir });
  await certsIssue({ out: certsDir, kind: "agent", name: "bench-backend" });
  const base = Number(process.env.WARDEN_TEST_PORT_BASE ?? "23200");
  const plain = await startBenchCoordinator("tls-plain", base);
  const secure = await startBenchCoordinator("tls-on", base + 100, { certsDir });
  try {
    const ca = readCaBundle(join(certsDir, "ca.pem"), "ca");
    const plainDp = createClient(InferenceService, plain.dataPlane);
    const tlsDp = createClient(InferenceService, secure.dataPlane, { tls: { ca } });
    const plainMain = createClient(InferenceService, plain.address);
    const tlsMain = createClient(InferenceService, secure.address, { tls: { ca } });
    const call = (c: typeof plainDp) => (): Promise<unknown> => c.predict({ model: "m", options: { Prompt: "hi" } });
    for (const c of [plainDp, tlsDp, plainMain, tlsMain]) {
      await c.predict({ model: "m", options: { Prompt: "warm" } }, { timeoutMs: 60_000 });
      await throughput(500, 16, call(c));
    }
    const rounds = 5;
    const r = { plainDp: [] as number[], tlsDp: [] as number[], plainMain: [] as number[], tlsMain: [] as number[] };
    for (let i = 0; i < rounds; i++) {
      r.plainDp.push(await throughput(1500, 64, call(plainDp)));
      r.tlsDp.push(await throughput(1500, 64, call(tlsDp)));
      r.plainMain.push(await throughput(1500, 64, call(plainMain)));
      r.tlsMain.push(await throughput(1500, 64, call(tlsMain)));
    }
    for (const c of [plainDp, tlsDp, plainMain, tlsMain]) c.close();
    const range = (xs: number[]): string => `${Math.min(...xs).toFixed(0)}–${Math.max(...xs).toFixed(0)}`;
    return [
      { name: `Predict, 64 concurrent callers, TLS on both hops, data-plane listener (rounds ${range(r.tlsDp)} vs ${range(r.plainDp)} calls/s)`, baseline: "same, plaintext", ours: median(r.tlsDp), baselineValue: median(r.plainDp), unit: "calls/s", higherIsBetter: true },
      { name: `Predict, 64 concurrent callers, TLS on both hops, main port (rounds ${range(r.tlsMain)} vs ${range(r.plainMain)} calls/s)`, baseline: "same, plaintext", ours: median(r.tlsMain), baselineValue: median(r.plainMain), unit: "calls/s", higherIsBetter: true },
    ];
  } finally {
    await Promise.all([plain.close(), secure.close()]);
    await rm(dir, { recursive: true, force: true });
  }
}
