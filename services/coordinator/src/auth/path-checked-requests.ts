import type { DescMessage } from "@bufbuild/protobuf";
import type { WardenError } from "@warden/common";
import { scanRequest, type PathPlan } from "./backend-path-check.js";

/**
 * A streaming call's requests, each checked against the method's path plan
 * before it is forwarded. The first is read and checked before any backend
 * is chosen (a refused opening sends nothing anywhere); a later refused
 * message aborts the call (`signal`) and `refusal` says why, for the handler
 * to answer instead of the abort.
 */
export class PathCheckedRequests {
  private readonly abort = new AbortController();
  private refused: WardenError | undefined;
  readonly signal: AbortSignal;

  constructor(
    private readonly message: DescMessage,
    private readonly plan: PathPlan,
    callerSignal: AbortSignal,
  ) {
    this.signal = AbortSignal.any([callerSignal, this.abort.signal]);
  }

  /** The refusal that ended the call, if one did. */
  get refusal(): WardenError | undefined {
    return this.refused;
  }

  private check(bytes: Uint8Array): void {
    const r = scanRequest(bytes, this.message, undefined, this.plan);
    if (r.refusal !== undefined) throw r.refusal;
  }

  /** Reads and checks the first request (throwing its refusal), then the rest as they come. */
  async open(requests: AsyncIterable<Uint8Array>): Promise<AsyncIterable<Uint8Array>> {
    const it = requests[Symbol.asyncIterator]();
    const first = await it.next();
    if (first.done !== true) this.check(first.value);
    const rest = async function* (self: PathCheckedRequests): AsyncGenerator<Uint8Array> {
      if (first.done === true) return;
      yield first.value;
      for (let n = await it.next(); n.done !== true; n = await it.next()) {
        try {
          self.check(n.value);
        } catch (err) {
          self.refused = err as WardenError;
          self.abort.abort(err);
          throw err;
        }
        yield n.value;
      }
    };
    return rest(this);
  }
}
