/**
 * The JSON the dashboard's server sends its browser client (snapshot, events,
 * placement explanations, action results). Plain data with numbers and ISO
 * strings — no bigint, no protobuf classes — so the browser bundle needs no
 * protobuf runtime. Shared by the server (dashboard-snapshot.ts) and the
 * client (client/), which is why this file imports nothing.
 */

export type DashboardNodeState = "ready" | "unreachable" | "lost" | "not reported since restart" | "unknown";

export type DashboardInstanceState = "loading" | "ready" | "freed" | "pending-eviction" | "leftover" | "orphan" | "unknown";

export interface DashboardGpu {
  readonly index: number;
  readonly name: string;
  readonly totalBytes: number;
  readonly usedBytes: number;
}

export interface DashboardForeign {
  readonly pid: number;
  readonly address: string;
  readonly detail: string;
}

export interface DashboardNode {
  readonly nodeId: string;
  readonly address: string;
  readonly state: DashboardNodeState;
  readonly draining: boolean;
  readonly drainRemaining: number;
  readonly embedded: boolean;
  readonly version: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly gpus: readonly DashboardGpu[];
  readonly ramTotalBytes: number;
  readonly ramUsedBytes: number;
  /** What the watchdog holds on the node (reserved, loading, ready, freed, pending, leftovers, orphans): Warden's own accounting. */
  readonly accountedBytes: number;
  readonly foreign: readonly DashboardForeign[];
  /** ISO time of the last heartbeat; "" when none. */
  readonly lastHeartbeatAt: string;
  readonly instanceCount: number;
}

export interface DashboardInstance {
  readonly model: string;
  readonly nodeId: string;
  readonly incarnation: string;
  readonly address: string;
  readonly state: DashboardInstanceState;
  readonly inFlight: number;
  /** ISO times; "" when never. */
  readonly lastUsedAt: string;
  readonly busySince: string;
  readonly sizeBytes: number;
  readonly pinned: boolean;
  readonly groups: readonly string[];
  readonly backend: string;
  readonly nodeState: DashboardNodeState;
  /** On a node whose agent is unreachable: the coordinator's own health probe of the backend answers (routed) or failed (not routed). */
  readonly outage?: "serving" | "probe failed";
  readonly leftover?: { readonly attempts: number; readonly lastError: string; readonly stuck: boolean };
}

export interface DashboardModel {
  readonly model: string;
  readonly backend: string;
  readonly groups: readonly string[];
  readonly pinned: boolean;
  readonly sizeBytes: number;
  /** The model's load job (ListModels' ModelReplicas.load_job), when it has one. */
  readonly loadJob?: DashboardLoadJob;
}

/** A load waiting for a node, loading, or failed; `forMs`: how long in that state when the snapshot was taken. */
export interface DashboardLoadJob {
  readonly state: "waiting" | "loading" | "failed";
  readonly phase: string;
  readonly nodeId: string;
  readonly reason: string;
  readonly code: string;
  readonly forMs: number;
  /**
   * Progress where the job reports it (0 = not known; absent from older coordinators): bytes of
   * the model's artifacts fetched and in all, and bytes per second while pulling.
   */
  readonly bytesDone?: number;
  readonly bytesTotal?: number;
  readonly bytesPerSecond?: number;
}

export interface DashboardSnapshot {
  /** ISO time the snapshot was taken (the coordinator's wall clock). */
  readonly at: string;
  readonly nodes: readonly DashboardNode[];
  readonly instances: readonly DashboardInstance[];
  readonly models: readonly DashboardModel[];
  /** One entry per configured model: its replicas (ListModels' replicas). Absent from older coordinators. */
  readonly replicas?: readonly DashboardReplicas[];
}

/** An event as the stream sends it: the audit event's proto JSON with its `type` (eventToJson). */
export interface DashboardEvent {
  readonly type: string;
  readonly id?: string;
  readonly time?: string;
  readonly nodeId?: string;
  readonly model?: string;
  readonly incarnation?: string;
  readonly [payload: string]: unknown;
}

/** Who the page is talking as: the client shows the action buttons only when `canAct`. */
export interface DashboardWhoAmI {
  readonly authOn: boolean;
  /** "" when auth is off. */
  readonly role: string;
  readonly name: string;
  readonly canAct: boolean;
  /** Per button (and the Policy page's Save): whether this token's role may (each its Admin API method's role). */
  readonly may?: Readonly<Record<DashboardPermission, boolean>>;
}

/** An error body of every dashboard endpoint (HTTP status alongside). */
export interface DashboardErrorBody {
  readonly error: { readonly code: string; readonly message: string; readonly field?: string };
}

/** One HA member as the HTTP side names it: `httpUrl` is "" when it has no HTTP listener (or it is not known yet). */
export interface DashboardHaMember {
  readonly holder: string;
  /** "leader", "standby" or "paused" (a leader without quorum: it still serves). */
  readonly role: string;
  readonly httpUrl: string;
}

/**
 * GET /api/dashboard/ha and GET /ha/leader: which member answered and who
 * leads. `enabled` false: a single coordinator (it always serves).
 */
export interface DashboardHa {
  readonly enabled: boolean;
  readonly self?: DashboardHaMember;
  /** Who holds the lease as this member last saw it; absent when nobody is known to. */
  readonly leader?: DashboardHaMember;
  /** The lease epoch, as a decimal string ("0" when no leader is known). */
  readonly epoch?: string;
  /** Every member seen lately, this one included: the only URLs the dashboard ever follows. */
  readonly members: readonly DashboardHaMember[];
}

/** What a dashboard control does, each one Admin API method (load: LoadModel … policy: UpdatePolicy). */
export type DashboardPermission = "load" | "unload" | "drain" | "undrain" | "scale" | "policy" | "logs";

/** One configured model's replicas: bounds (min..max), what the reconciler aims for and what is up. */
export interface DashboardReplicas {
  readonly model: string;
  readonly min: number;
  readonly max: number;
  readonly desired: number;
  readonly ready: number;
  readonly loading: number;
  readonly stopping: number;
  readonly leftovers: number;
  readonly queued: number;
  /** Set while scale-ups are held back (the last load's error). */
  readonly blocked?: { readonly error: string; readonly failures: number; readonly retryAfterMs: number };
}

/** GET /api/dashboard/policy: the live watchdog policy (durations in milliseconds). */
export interface DashboardPolicy {
  readonly limitPerNode: number;
  readonly idleCheck: boolean;
  readonly idleTimeoutMs: number;
  readonly busyCheck: boolean;
  readonly busyTimeoutMs: number;
  readonly memoryReclaimer: boolean;
  readonly memoryThreshold: number;
  readonly forceEvictionWhenBusy: boolean;
  readonly sizeAware: boolean;
  readonly tickIntervalMs: number;
  readonly models: readonly { readonly model: string; readonly pinned: boolean; readonly groups: readonly string[] }[];
}
