/**
 * Bounds on every map keyed by caller input (DESIGN §6: caps on everything
 * keyed by client input). Exceeding one throws RESOURCE_EXHAUSTED (or
 * INVALID_ARGUMENT for policy tables); nothing grows without bound.
 */
export interface WatchdogCaps {
  /** Instances and reservations tracked at once. @default 100000 */
  readonly maxInstances: number;
  /** Addresses holding request state at once (registered or not). @default 100000 */
  readonly maxAddresses: number;
  /** Open requests on one address. @default 100000 */
  readonly maxOpenRequestsPerAddress: number;
  /** Nodes with occupancy or memory input. @default 10000 */
  readonly maxNodes: number;
  /** Leftover/orphan entries reported for one node. @default 10000 */
  readonly maxOccupancyPerNode: number;
  /** GPUs in one memory reading. @default 64 */
  readonly maxDevicesPerNode: number;
  /** Models in the pin and group tables. @default 10000 */
  readonly maxModels: number;
  /** Groups per model. @default 64 */
  readonly maxGroupsPerModel: number;
  /** Length of model ids, group names, node ids, addresses and incarnations. @default 256 */
  readonly maxNameLength: number;
}

export const defaultCaps: WatchdogCaps = Object.freeze({
  maxInstances: 100_000,
  maxAddresses: 100_000,
  maxOpenRequestsPerAddress: 100_000,
  maxNodes: 10_000,
  maxOccupancyPerNode: 10_000,
  maxDevicesPerNode: 64,
  maxModels: 10_000,
  maxGroupsPerModel: 64,
  maxNameLength: 256,
});
