/**
 * Test fixture: an agent client's WatchBackends that never yields an event and
 * ends when the registry aborts it (the registry re-opens it otherwise).
 */
export function idleWatchBackends(_req: unknown, opts?: { signal?: AbortSignal }): AsyncIterable<never> {
  return {
    [Symbol.asyncIterator]: () => ({
      next: () =>
        new Promise<IteratorResult<never>>((resolve) => {
          opts?.signal?.addEventListener(
            "abort",
            () => {
              resolve({ done: true, value: undefined });
            },
            { once: true },
          );
        }),
    }),
  };
}
