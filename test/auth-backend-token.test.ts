/**
 * The backends' bearer token end to end, over real processes: a coordinator
 * with `auth.backendTokenFile` and its embedded agent start backend-sim with
 * LOCALAI_GRPC_AUTH_TOKEN, which then refuses any call without the token
 * (Health included, like LocalAI's backends); the agent's readiness checks and
 * the coordinator's routed calls carry it, so loads and predictions work.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code } from "@warden/common";
import { mintToken } from "@warden/coordinator";
import { createClient, createH2Client } from "@warden/grpc";
import { Backend, InferenceService } from "@warden/proto";
import { simModel, startTestCoordinator, type TestCoordinator } from "./support/coordinator-harness.js";
import { withToken } from "./support/auth-tokens.js";

describe("auth: the backends' token", () => {
  let tc: TestCoordinator;
  let dir: string;
  const token = mintToken();

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "warden-backend-token-"));
    await writeFile(join(dir, "backend.token"), `${token}\n`, { mode: 0o600 });
    tc = await startTestCoordinator({ models: [simModel("small")], extra: { auth: { backendTokenFile: join(dir, "backend.token") }, inferenceListen: "127.0.0.1:0" } });
  }, 60_000);

  afterAll(async () => {
    await tc.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("a started backend refuses calls without the token (Health included) and takes them with it; loads and predictions through the coordinator (both listeners) carry it", async () => {
    const loaded = (await tc.admin.loadModel({ model: "small" }, { timeoutMs: 60_000 })).instance;
    const address = loaded?.address ?? "";
    expect(address).not.toBe("");
    expect((await tc.inference.predict({ model: "small", options: { Prompt: "hi", Tokens: 2 } }, { timeoutMs: 60_000 })).reply?.message).toBeDefined();
    const dataPlane = createH2Client(InferenceService, tc.c.inferenceAddress ?? "");
    try {
      expect((await dataPlane.predict({ model: "small", options: { Prompt: "hi", Tokens: 2 } }, { timeoutMs: 60_000 })).reply?.message).toBeDefined();
    } finally {
      dataPlane.close();
    }

    const bare = createClient(Backend, address);
    const wrong = createClient(Backend, address, withToken(mintToken()));
    const right = createH2Client(Backend, address, withToken(token));
    try {
      await expect(bare.health({}, { timeoutMs: 10_000 })).rejects.toMatchObject({ code: Code.Unauthenticated });
      await expect(wrong.health({}, { timeoutMs: 10_000 })).rejects.toMatchObject({ code: Code.Unauthenticated });
      await expect(bare.predict({ Prompt: "x", ModelIdentity: "small" }, { timeoutMs: 10_000 })).rejects.toMatchObject({ code: Code.Unauthenticated });
      expect((await right.health({}, { timeoutMs: 10_000 })).message).toBeDefined();
    } finally {
      bare.close();
      wrong.close();
      right.close();
    }
  }, 90_000);
});
