import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { LoadJobPhase, LoadJobSchema, LoadJobState, ModelReplicasSchema } from "@warden/proto";
import { loadJobLine, loadJobsText, loadingLabel } from "./render-load-jobs.js";

const job = (init: Parameters<typeof create<typeof LoadJobSchema>>[1]) => create(LoadJobSchema, init);

describe("models ls: load jobs", () => {
  it("one line per state: waiting with the reason and how long, loading with its phase and node, failed with the code", () => {
    expect(loadJobLine(job({ model: "m", state: LoadJobState.WAITING, phase: LoadJobPhase.WAITING_FOR_NODE, reason: "no node fits: n1: node is draining", forMs: 12_000n }))).toBe("m: waiting for a node: no node fits: n1: node is draining (12s)");
    expect(loadJobLine(job({ model: "m", state: LoadJobState.WAITING, phase: LoadJobPhase.WAITING_FOR_RECOVERY, reason: "the coordinator's recovery window", forMs: 2_000n }))).toBe("m: waiting for the recovery window: the coordinator's recovery window (2s)");
    expect(loadJobLine(job({ model: "m", state: LoadJobState.LOADING, phase: LoadJobPhase.STARTING, nodeId: "n1", forMs: 3_000n }))).toBe("m: loading (starting) on n1 (3s)");
    expect(loadJobLine(job({ model: "m", state: LoadJobState.LOADING, phase: LoadJobPhase.LOADING, nodeId: "n1", forMs: 1_000n, bytesDone: 1n, bytesTotal: 4n }))).toBe("m: loading (loading, 25%) on n1 (1s)");
    expect(loadJobLine(job({ model: "m", state: LoadJobState.LOADING, phase: LoadJobPhase.PULLING, nodeId: "n1", forMs: 4_000n, bytesDone: 42n, bytesTotal: 100n, bytesPerSecond: 12_373_196n }))).toBe("m: loading (pulling, 42%, 11.8 MiB/s) on n1 (4s)");
    expect(loadJobLine(job({ model: "m", state: LoadJobState.FAILED, phase: LoadJobPhase.WAITING_FOR_NODE, reason: "cannot load now", code: "UNAVAILABLE", forMs: 120_000n }))).toBe("m: failed: cannot load now (UNAVAILABLE, 2m ago)");
  });

  it("models load's progress line once the job is loading: the phase, with percent and rate when the pull reports them", () => {
    expect(loadingLabel(job({ model: "m", state: LoadJobState.LOADING, phase: LoadJobPhase.PULLING, nodeId: "gpu-3", bytesDone: 42n, bytesTotal: 100n, bytesPerSecond: 12_373_196n }))).toBe("loading m (pulling, 42%, 11.8 MiB/s) on gpu-3");
    // The rate is not known yet in the pull's first moment; below 1 MiB/s it is in KiB/s.
    expect(loadingLabel(job({ model: "m", state: LoadJobState.LOADING, phase: LoadJobPhase.PULLING, nodeId: "gpu-3", bytesDone: 0n, bytesTotal: 4_000n }))).toBe("loading m (pulling, 0%) on gpu-3");
    expect(loadingLabel(job({ model: "m", state: LoadJobState.LOADING, phase: LoadJobPhase.PULLING, nodeId: "gpu-3", bytesDone: 1n, bytesTotal: 2n, bytesPerSecond: 512_000n }))).toBe("loading m (pulling, 50%, 500.0 KiB/s) on gpu-3");
    expect(loadingLabel(job({ model: "m", state: LoadJobState.LOADING, phase: LoadJobPhase.VERIFYING, nodeId: "gpu-3", bytesDone: 100n, bytesTotal: 100n }))).toBe("loading m (verifying, 100%) on gpu-3");
    expect(loadingLabel(job({ model: "m", state: LoadJobState.LOADING, phase: LoadJobPhase.STARTING, nodeId: "gpu-3" }))).toBe("loading m (starting) on gpu-3");
  });

  it("a backend bundle's install: resolving its image, unpacking its layers", () => {
    expect(loadingLabel(job({ model: "m", state: LoadJobState.LOADING, phase: LoadJobPhase.RESOLVING, nodeId: "gpu-3" }))).toBe("loading m (resolving) on gpu-3");
    expect(loadingLabel(job({ model: "m", state: LoadJobState.LOADING, phase: LoadJobPhase.UNPACKING, nodeId: "gpu-3" }))).toBe("loading m (unpacking) on gpu-3");
    expect(loadJobLine(job({ model: "m", state: LoadJobState.LOADING, phase: LoadJobPhase.UNPACKING, nodeId: "n1", forMs: 5_000n }))).toBe("m: loading (unpacking) on n1 (5s)");
    expect(loadJobLine(job({ model: "m", state: LoadJobState.LOADING, phase: LoadJobPhase.RESOLVING, nodeId: "n1", forMs: 1_000n }))).toBe("m: loading (resolving) on n1 (1s)");
  });

  it("a heading and the jobs of the models asked for; nothing without jobs", () => {
    const rs = [create(ModelReplicasSchema, { model: "a", loadJob: job({ model: "a", state: LoadJobState.WAITING, reason: "x" }) }), create(ModelReplicasSchema, { model: "b" })];
    expect(loadJobsText(rs, undefined)).toBe("LOAD JOBS\na: waiting for a node: x (0ms)");
    expect(loadJobsText(rs, "b")).toBe("");
  });
});
