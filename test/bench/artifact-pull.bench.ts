/**
 * An artifact pull of 128 MiB over loopback HTTP into the agent's cache
 * (partial file, SHA-256, fsync, rename) against the same bytes fetched and
 * hashed into a plain file with node:http and a write stream, in the same
 * run: median of interleaved reps. What the cache's bookkeeping costs on top
 * of the download and hash every pull needs anyway.
 */
import { createHash } from "node:crypto";
import { createWriteStream } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { get } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { nullLogger, systemClock } from "@warden/common";
import { ArtifactCache } from "../../services/agent/src/artifact-cache.js";
import { bytesOf, sha256Hex, startArtifactServer } from "../support/artifact-server.js";
import { median, type BenchResult } from "./bench-result.js";

const sizeBytes = 128 * 1024 * 1024;
const reps = 5;

async function bareDownload(url: string, file: string): Promise<string> {
  const hash = createHash("sha256");
  await new Promise<void>((resolve, reject) => {
    get(url, (res) => {
      res.on("data", (c: Buffer) => hash.update(c));
      pipeline(res, createWriteStream(file)).then(resolve, reject);
    }).on("error", reject);
  });
  return hash.digest("hex");
}

export async function run(): Promise<BenchResult[]> {
  const server = await startArtifactServer();
  server.chunkBytes = 1024 * 1024;
  const body = bytesOf(sizeBytes, 3);
  server.files.set("/big.bin", body);
  const spec = { source: `${server.url}/big.bin`, sha256: sha256Hex(body), sizeBytes, path: "big.bin" };
  const ours: number[] = [];
  const bare: number[] = [];
  try {
    for (let i = 0; i < reps; i++) {
      const dir = await mkdtemp(join(tmpdir(), "warden-bench-artifact-"));
      try {
        const cache = new ArtifactCache({ modelsPath: dir, clock: systemClock, logger: nullLogger, pullTimeoutMs: 600_000, stallTimeoutMs: 60_000, storeReader: undefined });
        let t = performance.now();
        await cache.ensure(spec, new AbortController().signal, () => {});
        ours.push(performance.now() - t);
        t = performance.now();
        if ((await bareDownload(spec.source, join(dir, "bare.bin"))) !== spec.sha256) throw new Error("bare download hashed wrong");
        bare.push(performance.now() - t);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    }
  } finally {
    await server.close();
  }
  return [
    {
      name: `artifact pull of 128 MiB over loopback HTTP into the cache (verify, fsync, rename), median of ${String(reps)}`,
      baseline: "node:http download + SHA-256 into a plain file, no fsync",
      ours: median(ours),
      baselineValue: median(bare),
      unit: "ms",
      higherIsBetter: false,
    },
  ];
}
