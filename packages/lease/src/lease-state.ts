/**
 * The lease key as last seen: its revision (0 when the key never existed) and
 * who wrote it (null when it is absent or deleted, so it can be created).
 */
export interface SeenKey {
  readonly revision: number;
  readonly holder: string | null;
  /** When this revision was first seen, on this coordinator's clock. */
  readonly sinceMs: number;
  /** The count for this revision already restarted once after the stream's silence (it never does twice). */
  readonly recounted?: true;
}

/** The one write in flight: the adapter sends it and reports exactly one result for it. */
export interface PendingWrite {
  readonly kind: "create" | "update";
  /** Revision the update expects (0 for create). */
  readonly expectedRevision: number;
  readonly sentAtMs: number;
}

export type LeaseState =
  /**
   * Watching the key; `seen` is undefined until the first read answers.
   * `resuming`: this keeper led until its lease ran out with nobody else's
   * write seen since; while the key is still its own it retries the key every
   * `retryMs` instead of counting a whole lease (a resume in place).
   * `doubt`: the stream did not answer this follower (a read or its takeover
   * failed), so the key's silence may be the stream's, not the leader's: no
   * takeover until a read answers again, and the count restarts from then.
   */
  | { readonly kind: "follower"; readonly seen: SeenKey | undefined; readonly resuming?: true; readonly doubt?: true }
  /** A create/update to take the key is in flight. */
  | { readonly kind: "candidate"; readonly seen: SeenKey | undefined; readonly pending: PendingWrite; readonly resuming?: true }
  | {
      readonly kind: "leader";
      /** The revision that won the key: every command to an agent carries it. */
      readonly epoch: number;
      /** Latest revision this leader wrote. */
      readonly revision: number;
      /** Sent time of the last successful write + lease: no follower takes over before this. */
      readonly leaseUntilMs: number;
      readonly nextRenewAtMs: number;
      readonly pending: PendingWrite | undefined;
    }
  /** Gave up leading with a write still in flight; waits for its result, then follows. */
  | { readonly kind: "stepping-down"; readonly seen: SeenKey | undefined; readonly pending: PendingWrite; readonly resuming?: true };

export type LeaseInput =
  /** The key as read or watched; revision 0 and holder null: it does not exist. */
  | {
      readonly kind: "entry";
      readonly revision: number;
      readonly holder: string | null;
      readonly nowMs: number;
      /**
       * Read through the stream leader after a refused write, and older than what
       * was seen: the stream lost writes in a leader change (nats-server 2.9 under
       * load). Taken as the key's state, not as a stale read.
       */
      readonly rewound?: true;
    }
  | { readonly kind: "write-ok"; readonly revision: number; readonly nowMs: number }
  /** Compare-and-set refused: someone else wrote the key since the expected revision. */
  | { readonly kind: "write-wrong-revision"; readonly nowMs: number }
  /** No answer within the deadline, no quorum, connection lost: the write may or may not have happened. */
  | { readonly kind: "write-failed"; readonly nowMs: number }
  /** A read of the key (a follower's periodic probe) got no answer: the stream may be down. */
  | { readonly kind: "read-failed"; readonly nowMs: number }
  | { readonly kind: "tick"; readonly nowMs: number };

export type LeaseEffect =
  | { readonly kind: "create" }
  | { readonly kind: "update"; readonly expectedRevision: number }
  /** (Re)read the key and watch it: the view is known to be stale. */
  | { readonly kind: "watch" }
  | { readonly kind: "become-leader"; readonly epoch: number }
  | { readonly kind: "step-down"; readonly epoch: number; readonly reason: StepDownReason };

/** lease-expiring: no renewal landed by leaseUntil − margin; superseded: someone else wrote the key. */
export type StepDownReason = "lease-expiring" | "superseded";

export interface LeaseStep {
  readonly state: LeaseState;
  readonly effects: readonly LeaseEffect[];
  /** Call `next` with a tick at this time (own clock), or undefined: nothing is due without an input. */
  readonly wakeAtMs: number | undefined;
}
