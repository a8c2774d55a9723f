import { describe, expect, it } from "vitest";
import { Code, WardenError, invalidArgument } from "@warden/common";
import { errorBody } from "./openai-errors.js";
import { missing } from "./openai-fields.js";

const body = (e: WardenError) => errorBody(e).error;

describe("OpenAI's error shape: type and code from OpenAI's set, the field in the message", () => {
  it("maps each status to OpenAI's type and code, never a gRPC code name", () => {
    expect(body(missing("model"))).toEqual({ message: "model: is required", type: "invalid_request_error", param: "model", code: "missing_required_parameter" });
    expect(body(invalidArgument("temperature", "must be in [0, 2], got 5"))).toEqual({ message: "temperature: must be in [0, 2], got 5", type: "invalid_request_error", param: "temperature", code: null });
    expect(body(new WardenError(Code.NotFound, 'model: "x" is not configured', { details: { field: "model" } }))).toMatchObject({ type: "invalid_request_error", code: "model_not_found" });
    expect(body(new WardenError(Code.Unauthenticated, "unknown token"))).toEqual({ message: "unknown token", type: "invalid_request_error", param: null, code: "invalid_api_key" });
    expect(body(new WardenError(Code.PermissionDenied, "model: this token may not call model \"x\"", { details: { field: "model" } }))).toMatchObject({ type: "invalid_request_error", code: "model_not_found" });
    expect(body(new WardenError(Code.PermissionDenied, "role viewer may not call the inference API"))).toMatchObject({ type: "invalid_request_error", code: null });
    expect(body(new WardenError(Code.ResourceExhausted, "model \"m\" is in load-failure cooldown"))).toMatchObject({ type: "requests", code: "rate_limit_exceeded" });
    expect(body(new WardenError(Code.ResourceExhausted, "body: too large", { details: { field: "body", httpStatus: 413 } }))).toMatchObject({ type: "invalid_request_error", code: null });
    for (const c of [Code.Unavailable, Code.FailedPrecondition, Code.Internal, Code.DeadlineExceeded, Code.Unimplemented, Code.Unknown]) {
      expect(body(new WardenError(c, "x"))).toMatchObject({ type: "server_error", code: null });
    }
  });

  it("puts the field at the head of a message that does not name it yet", () => {
    expect(body(new WardenError(Code.ResourceExhausted, "the speech is longer than 8 bytes", { details: { field: "input", httpStatus: 400 } })).message).toBe("input: the speech is longer than 8 bytes");
    expect(body(new WardenError(Code.NotFound, "no route for GET /x", { details: { field: "url" } })).message).toBe("url: no route for GET /x");
  });
});
