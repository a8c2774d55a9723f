import { WardenError, type Code } from "@warden/common";

/** Lets every pending promise chain run (one macrotask turn drains all microtasks). */
export async function flush(rounds = 2): Promise<void> {
  for (let i = 0; i < rounds; i++) {
    // eslint-disable-next-line no-restricted-globals -- test helper only: yields to the event loop between ManualClock steps
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
}

/** A promise with its settle functions exposed. */
export interface Deferred<T> {
  readonly promise: Promise<T>;
  resolve(value: T): void;
  reject(err: unknown): void;
}

export function deferred<T>(): Deferred<T> {
  let resolve: (value: T) => void = () => {};
  let reject: (err: unknown) => void = () => {};
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** The WardenError a promise rejects with; fails the test if it fulfils. */
export async function rejection(p: Promise<unknown>): Promise<WardenError> {
  try {
    await p;
  } catch (err) {
    return WardenError.from(err);
  }
  throw new Error("expected a rejection, got a value");
}

/** An error as an agent RPC would reject with it. */
export function rpcError(code: Code, message: string): WardenError {
  return new WardenError(code, message);
}
