import type { ArtifactCacheReport, ForeignProcess, GpuInfo, InventoryEntry, NodeResources, OrphanProcess } from "@warden/proto";
import type { AgentPort } from "@warden/loader";
import type { BundleFact } from "@warden/placement";
import type { NodeLimits } from "./node-limits.js";
import type { InventoryDeltaReport, ReportedInventory } from "./inventory-delta.js";
import type { SettledMark } from "./unchanged-heartbeat.js";

export type NodeHealthState = "ready" | "unreachable" | "lost";

/**
 * One registered node as the coordinator knows it. `C` is the connector's
 * client for the agent (a gRPC client in production, a fake in tests); the
 * table only hands it back to the connector.
 */
export interface NodeRecord<C> {
  readonly nodeId: string;
  address: string;
  labels: Record<string, string>;
  gpus: GpuInfo[];
  readonly embedded: boolean;
  /**
   * Counts toward the mass-unreachability guard: registered with a credential
   * (a node token, or in process), or has had a heartbeat applied since it
   * registered, or was vouched for before it registered again (an agent
   * restart keeps it). A registration nobody vouches for — junk that never
   * heartbeats — cannot pause node-loss handling.
   */
  vouched: boolean;
  /** Warden version the agent registered with ("" from agents before 0.2). */
  version: string;
  /**
   * Catalog backend names the agent registered with (≤ 256, validated). Empty
   * from an agent older than RegisterRequest.backends: placement then takes
   * the node as able to start any backend, as before.
   */
  backends: ReadonlySet<string>;
  /** Backend name -> sha256 of the bundle its catalog entry names (Register.backend_bundles, validated). */
  bundles: ReadonlyMap<string, string>;
  bootEpoch: bigint;
  sequence: bigint;
  lastHeartbeatMs: number;
  lastHeartbeatWallMs: number;
  /**
   * Monotonic time a heartbeat of this registration last arrived — applied,
   * or still waiting for its turn behind others (the coordinator's own
   * backlog). Silence is measured from here: a busy coordinator must not
   * call a node unreachable for a heartbeat it holds.
   */
  heardMs: number;
  /**
   * Heartbeats of this registration that arrived and still wait for their
   * turn (each counted by `NodeTable.arrived`, uncounted by `released` when
   * its turn comes). While any waits the node is not silent, however long
   * the coordinator's backlog holds it.
   */
  heldHeartbeats: number;
  state: NodeHealthState;
  /**
   * Monotonic time this coordinator marked the node unreachable (undefined
   * while ready or lost). Lost-after counts from here, not from the last
   * heartbeat: after a coordinator pause every node's silence exceeds grace +
   * lost-after at once, but none was seen unreachable for lost-after.
   */
  unreachableSinceMs: number | undefined;
  draining: boolean;
  /** Last inventory; undefined until the first heartbeat. */
  inventory: InventoryEntry[] | undefined;
  /**
   * The inventory as the agent last reported it (before fences and the
   * loader's gone filter): the base its next delta heartbeat is against.
   * Undefined until a full inventory arrives in this boot epoch, so a new
   * coordinator, a new leader or a restarted agent starts from a full one.
   */
  reported: ReportedInventory | undefined;
  orphans: OrphanProcess[];
  /** Listeners in the agent's port range it did not start (last heartbeat); never signalled. */
  foreign: ForeignProcess[];
  resources: NodeResources | undefined;
  client: C;
  port: AgentPort;
  /** Ready instances missing from consecutive inventories (vanished after two). */
  readonly missing: Map<string, number>;
  /**
   * Open stop intents' incarnations the loader does not track, lacking from
   * the last applied inventory (gone-intents.ts: cleared after a second).
   * Holds only intents open at that inventory.
   */
  intentMisses: ReadonlyMap<string, number>;
  /**
   * Incarnations confirmed gone → this boot epoch's sequence last seen at the
   * confirmation. A heartbeat up to one past it may carry an inventory taken
   * before the stop took effect (the one in flight then), so it cannot show
   * them; the first heartbeat beyond releases the fence. Dropped with the boot
   * epoch (older epochs' heartbeats are refused). Capped per node, oldest out.
   */
  readonly fences: Map<string, bigint>;
  /**
   * Set by a full reconcile that left the node settled (unchanged-heartbeat.ts):
   * its next empty delta skips the reconcile while the mark still holds.
   * Undefined until then, and after any reconcile that left something pending.
   */
  settled: SettledMark | undefined;
  /** Aborts the node's exit watch (the connector's WatchBackends stream). */
  watchAbort: AbortController | undefined;
  /** Placement limits from the agent's config (Register); replaced on every registration. */
  agentLimits: NodeLimits;
  /** The agent's artifact cache as last reported; undefined until a heartbeat carries one (an agent without a modelsPath never does). */
  artifactCache: NodeArtifactCache | undefined;
}

/** A node's artifact cache for placement (HeartbeatRequest.artifact_cache). */
export interface NodeArtifactCache {
  readonly freeBytes: number;
  readonly evictableBytes: number;
  /** Verified digests (hex) it holds; undefined until the agent sent its set. */
  readonly digests: ReadonlySet<string> | undefined;
  /** Catalog backend name → its bundle there (ArtifactCacheReport.bundles); undefined until the agent sent its list (an older agent never does: no bundle counted). */
  readonly bundles?: ReadonlyMap<string, BundleFact> | undefined;
}

/**
 * What a Register carries (validated by the caller against its bounds
 * first). An object so fields can be added without touching call sites.
 */
export interface NodeRegistration<C> {
  readonly nodeId: string;
  readonly address: string;
  readonly labels: Record<string, string>;
  readonly gpus: GpuInfo[];
  readonly bootEpoch: bigint;
  readonly embedded?: boolean;
  /** Placement limits from the agent's config. @default {} */
  readonly limits?: NodeLimits;
  /** The caller presented a credential bound to this node id (auth on). @default false */
  readonly credentialed?: boolean;
  /** The client to use (the embedded agent's in-process one); else the connector makes one. */
  readonly client?: C;
  /** The agent's Warden version; absent or "" from agents before 0.2. */
  readonly version?: string;
  /** The agent's catalog backend names; absent or empty from older agents. */
  readonly backends?: readonly string[];
  /** Backend name -> sha256 of the bundle its catalog entry names now; absent from older agents. */
  readonly backendBundles?: Readonly<Record<string, string>>;
}

/** One heartbeat as the agent sent it (validated by the caller first). */
export interface HeartbeatReport {
  readonly nodeId: string;
  readonly bootEpoch: bigint;
  readonly sequence: bigint;
  /** The whole inventory; empty when `delta` is set. */
  readonly backends: InventoryEntry[];
  /** Changes against an earlier acknowledged inventory instead of a whole one (HeartbeatRequest.delta). */
  readonly delta?: InventoryDeltaReport;
  readonly orphans: OrphanProcess[];
  /** Absent from an older agent: read as none. */
  readonly foreign?: ForeignProcess[];
  readonly resources: NodeResources | undefined;
  /** Absent from an agent without a modelsPath, or older: the last one stays. */
  readonly artifactCache?: ArtifactCacheReport;
}

/**
 * What a heartbeat's answer tells the agent: `register` (unknown node, or
 * another boot epoch), `ok` (applied, or ignored as stale), or `send-full`
 * (its delta was not applied: the next heartbeat carries the whole inventory).
 */
export type HeartbeatAnswer = "register" | "ok" | "send-full";

/** Registered, and no inventory applied since: what runs there is not known, so nothing is placed there and it is listed NOT_REPORTED. */
export function awaitsInventory(n: Pick<NodeRecord<unknown>, "inventory">): boolean {
  return n.inventory === undefined;
}
