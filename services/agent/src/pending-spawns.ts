import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { BackendState } from "@warden/proto";
import type { InventoryEntryInit } from "./proto-views.js";

/** A start past its last fence check whose process is not in the table yet. */
export interface PendingSpawn {
  readonly incarnation: string;
  readonly model: string;
  readonly backend: string;
  readonly address: string;
  readonly gpuDevice: string;
  readonly startedAtMs: number;
  readonly loadDigest: string;
}

/**
 * Starts between their last leader-fence check and the table's entry for
 * their process: the spawn and reading its /proc entry are awaited there.
 * An inventory taken meanwhile (a new leader's Register) lists each as
 * SPAWNING with pid 0, so that leader counts it for the node's groups, limits
 * and memory instead of placing the other member of its group beside it.
 * Owned by the start flow (start-backend.ts): added in the turn its fence
 * check passes, removed in the turn the table takes the process, or when the
 * start fails first.
 */
export class PendingSpawns {
  private readonly byIncarnation = new Map<string, PendingSpawn>();

  add(p: PendingSpawn): void {
    this.byIncarnation.set(p.incarnation, p);
  }

  remove(incarnation: string): void {
    this.byIncarnation.delete(incarnation);
  }

  get size(): number {
    return this.byIncarnation.size;
  }

  /** Inventory entries for the starts pending now (no pid, no memory yet). */
  entries(): InventoryEntryInit[] {
    return Array.from(this.byIncarnation.values(), (p) => ({
      incarnation: p.incarnation,
      model: p.model,
      address: p.address,
      pid: 0,
      state: BackendState.SPAWNING,
      memoryBytes: 0n,
      gpuDevice: p.gpuDevice,
      startedAt: timestampFromMs(p.startedAtMs),
      backend: p.backend,
      loadDigest: p.loadDigest,
    }));
  }
}
