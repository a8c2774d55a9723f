import { isWardenError } from "@warden/common";

/** The code, named field and message of a refused call (the test fails if the call succeeds). */
export async function refusal(call: Promise<unknown>): Promise<{ code: number; field: unknown; message: string }> {
  try {
    await call;
  } catch (err) {
    if (!isWardenError(err)) throw err;
    return { code: err.code, field: err.details["field"], message: err.message };
  }
  throw new Error("the call was accepted");
}
