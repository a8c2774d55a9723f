import { isWardenError, WardenError } from "@warden/common";

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

/**
 * The WardenError a refused call ends with. When the call is accepted the test
 * fails, with what `explain` says about the answer (where a load ran, what the
 * coordinator saw) so an accepted refusal can be understood from its log alone.
 */
export async function refusedWith(call: Promise<unknown>, explain?: (answer: unknown) => Promise<string>): Promise<WardenError> {
  let answer: unknown;
  try {
    answer = await call;
  } catch (err) {
    return WardenError.from(err);
  }
  const show = (v: unknown): string => JSON.stringify(v, (_k, x: unknown) => (typeof x === "bigint" ? String(x) : x));
  throw new Error(`expected a refusal, got ${show(answer)}${explain === undefined ? "" : `; ${await explain(answer)}`}`);
}
