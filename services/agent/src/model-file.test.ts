import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, isWardenError } from "@warden/common";
import { resolveModelFile } from "./model-file.js";

async function errorOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    if (isWardenError(err, Code.InvalidArgument)) return err.rawMessage;
    throw err;
  }
  throw new Error("expected INVALID_ARGUMENT");
}

describe("resolveModelFile", () => {
  let dir: string;
  let models: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "warden-model-file-"));
    models = join(dir, "models");
    await mkdir(join(models, "blobs"), { recursive: true });
    await mkdir(join(models, "voices"), { recursive: true });
    await writeFile(join(models, "llama.gguf"), "GGUF");
    await writeFile(join(models, "blobs", "abc"), "GGUF");
    await writeFile(join(dir, "secret"), "no");
    await symlink(join(models, "blobs", "abc"), join(models, "voices", "linked.onnx"));
    await symlink(join(dir, "secret"), join(models, "escape.gguf"));
    await symlink(dir, join(models, "up"));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("sends a relative file absolute under the models path, keeping an inside symlink's name", async () => {
    expect(await resolveModelFile("modelFile", "llama.gguf", models)).toBe(join(models, "llama.gguf"));
    expect(await resolveModelFile("modelFile", "voices/linked.onnx", models)).toBe(join(models, "voices", "linked.onnx"));
    expect(await resolveModelFile("modelFile", join(models, "llama.gguf"), models)).toBe(join(models, "llama.gguf"));
    expect(await resolveModelFile("modelFile", "", models)).toBe("");
  });

  it("refuses traversal, outside absolute paths, symlink escapes and missing files, naming the field", async () => {
    expect(await errorOf(resolveModelFile("modelFile", "../secret", models))).toMatch(/^modelFile: must not contain a "\.\." segment/);
    expect(await errorOf(resolveModelFile("modelFile", "blobs/../llama.gguf", models))).toMatch(/^modelFile: must not contain a "\.\." segment/);
    expect(await errorOf(resolveModelFile("modelFile", "../../../../etc/passwd", models))).toMatch(/"\.\." segment/);
    expect(await errorOf(resolveModelFile("modelFile", "/etc/passwd", models))).toMatch(/^modelFile: "\/etc\/passwd" is outside the models directory/);
    expect(await errorOf(resolveModelFile("modelFile", `${models}-other/x`, models))).toMatch(/is outside the models directory/);
    expect(await errorOf(resolveModelFile("modelFile", "escape.gguf", models))).toMatch(/^modelFile: "escape\.gguf" leads outside the models directory .* through a symlink/);
    expect(await errorOf(resolveModelFile("modelFile", "up/secret", models))).toMatch(/through a symlink/);
    expect(await errorOf(resolveModelFile("modelFile", "nope.gguf", models))).toMatch(/^modelFile: no such file .*nope\.gguf under the models directory/);
    expect(await errorOf(resolveModelFile("modelFile", "a\u0000b", models))).toMatch(/control characters/);
    expect(await errorOf(resolveModelFile("modelFile", "llama.gguf", undefined))).toMatch(/^modelFile: this agent has no modelsPath/);
  });
});
