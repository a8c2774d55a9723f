/** Bounds on the streaming requests kept for a retry before the first reply: past either, no retry. */
export const replayMaxMessages = 256;
export const replayMaxBytes = 4 * 1024 * 1024;

/**
 * A streaming call's requests, read once from the caller and kept until the
 * first reply so the retry-once on a fresh instance can send them again.
 * One pull on the caller's stream at a time: an abandoned attempt never
 * swallows a message meant for the next. `commit()` (first reply, or a
 * bound passed) ends replay and stops keeping what was sent.
 */
export class ReplayableRequests {
  private readonly source: AsyncIterator<Uint8Array>;
  private readonly log: Uint8Array[] = [];
  /** Absolute index of log[0]. */
  private base = 0;
  private bytes = 0;
  private ended = false;
  private committed = false;
  private pulling: Promise<void> | undefined;

  constructor(requests: AsyncIterable<Uint8Array>) {
    this.source = requests[Symbol.asyncIterator]();
  }

  /** Whether an attempt can start over with every request sent so far. */
  canReplay(): boolean {
    return !this.committed;
  }

  commit(): void {
    this.committed = true;
  }

  private pull(): Promise<void> {
    this.pulling ??= this.source.next().then(
      (r) => {
        this.pulling = undefined;
        if (r.done === true) {
          this.ended = true;
          return;
        }
        this.log.push(r.value);
        this.bytes += r.value.length;
        if (this.base + this.log.length > replayMaxMessages || this.bytes > replayMaxBytes) this.committed = true;
      },
      (err: unknown) => {
        this.pulling = undefined;
        throw err;
      },
    );
    return this.pulling;
  }

  /** The requests for one attempt: those sent so far again, then the caller's as they come. */
  attempt(): AsyncIterable<Uint8Array> {
    if (this.base > 0) this.committed = true;
    let at = this.base;
    return {
      [Symbol.asyncIterator]: () => ({
        next: async (): Promise<IteratorResult<Uint8Array>> => {
          while (at >= this.base + this.log.length) {
            if (this.ended) return { value: undefined, done: true };
            await this.pull();
          }
          const value = this.log[at - this.base] as Uint8Array;
          at++;
          if (this.committed) {
            // Nothing will be replayed: drop what this attempt has sent.
            const drop = at - this.base;
            this.log.splice(0, drop);
            this.base = at;
            this.bytes = 0;
          }
          return { value, done: false };
        },
        return: (): Promise<IteratorResult<Uint8Array>> => Promise.resolve({ value: undefined, done: true }),
      }),
    };
  }
}
