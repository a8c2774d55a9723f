import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { LoadJobPhase, LoadJobSchema, LoadJobState } from "@warden/proto";
import { dashboardLoadJob } from "./dashboard-snapshot.js";
import { loadJobText } from "./view-model.js";

describe("the dashboard's load job", () => {
  it("carries a pull's bytes fetched, bytes in all and rate from ListModels' load_job", () => {
    const j = create(LoadJobSchema, { model: "m", state: LoadJobState.LOADING, phase: LoadJobPhase.PULLING, nodeId: "gpu-3", forMs: 12_000n, bytesDone: 1_288_490_189n, bytesTotal: 4_509_715_661n, bytesPerSecond: 89_128_960n });
    expect(dashboardLoadJob(j)).toEqual({ state: "loading", phase: "pulling", nodeId: "gpu-3", reason: "", code: "", forMs: 12_000, bytesDone: 1_288_490_189, bytesTotal: 4_509_715_661, bytesPerSecond: 89_128_960 });
  });

  it("a backend bundle's install, ListModels to the page's line: resolving its image, unpacking its layers, failed in either", () => {
    const loading = (phase: LoadJobPhase) => dashboardLoadJob(create(LoadJobSchema, { model: "m", state: LoadJobState.LOADING, phase, nodeId: "gpu-3", forMs: 12_000n }));
    expect(loadJobText("m", loading(LoadJobPhase.RESOLVING))).toBe("m: loading (resolving) on gpu-3 (12s)");
    expect(loadJobText("m", loading(LoadJobPhase.UNPACKING))).toBe("m: loading (unpacking) on gpu-3 (12s)");
    const failed = create(LoadJobSchema, { model: "m", state: LoadJobState.FAILED, phase: LoadJobPhase.RESOLVING, nodeId: "gpu-3", reason: "cannot reach the registry", code: "FAILED_PRECONDITION" });
    expect(dashboardLoadJob(failed)).toMatchObject({ state: "failed", phase: "resolving", code: "FAILED_PRECONDITION" });
  });

  it("says 0 where the job reports no bytes", () => {
    const j = create(LoadJobSchema, { model: "m", state: LoadJobState.WAITING, phase: LoadJobPhase.WAITING_FOR_NODE, reason: "node is draining" });
    expect(dashboardLoadJob(j)).toMatchObject({ state: "waiting", phase: "waiting_for_node", bytesDone: 0, bytesTotal: 0, bytesPerSecond: 0 });
  });
});
