import type { Clock, Logger, Rng } from "@warden/common";
import type { CoordinatorConfig } from "../config/coordinator-config.js";
import type { Coordinator } from "../coordinator.js";
import type { HttpServer } from "../http/http-server.js";
import type { JetStreamJournal } from "./jetstream-journal.js";
import type { StandbyServer } from "./standby-server.js";

// The HA runner's types (ha-runner.ts): its API, and the term its serial queue changes.

export interface HaRunnerDeps {
  readonly clock?: Clock;
  readonly rng?: Rng;
  readonly logger?: Logger;
}

/** One HA member (`warden coordinator --ha`), leader or standby. */
export interface HaRunner {
  readonly holder: string;
  /** The advertised host:port. */
  readonly advertise: string;
  /** host:port of `/metrics`, when `metricsListen` is set. */
  readonly metricsAddress: string | undefined;
  /** The HTTP base URL this member announces (undefined: no httpListen, or its port could not bind yet). */
  httpUrl(): string | undefined;
  /** Rejects if this member can no longer serve even as a standby (its own address taken): the process should exit. A failed takeover does not: the member stands by again. */
  readonly failed: Promise<never>;
  reload(config: CoordinatorConfig): Promise<void>;
  /** Leaves the lease and the membership, closes the inner coordinator or standby server, then NATS. Backends keep running. */
  close(options?: { readonly stopBackends?: boolean }): Promise<void>;
}

/** The lease epoch a term writes and commands under, and whether it is paused (read by the term's fences at the moment they act). */
export interface TermFence {
  epoch: bigint;
  paused: boolean;
}

/** Who serves on `listen` right now: one owner (the runner's serial queue) changes it. */
export type Term =
  | { readonly kind: "none" }
  | { readonly kind: "standby"; readonly server: StandbyServer; readonly http: HttpServer | undefined }
  /** `epoch`: the lease revision this term acts under (a resume in place moves it on). */
  | { readonly kind: "leading"; epoch: bigint; readonly inner: Coordinator; readonly journal: JetStreamJournal; paused: boolean; readonly fence: TermFence };
