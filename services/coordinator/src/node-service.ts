import type { NodeService } from "@warden/proto";
import type { ServiceImpl } from "@warden/grpc";
import { invalidArgument, type Clock } from "@warden/common";
import type { NodeRegistry } from "./node-registry.js";

const idPattern = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
const addressPattern = /^[A-Za-z0-9.\-[\]:]+:\d{1,5}$|^in-process$/;
/** Inventory entries accepted per heartbeat (client-keyed input is capped). */
const maxInventory = 4096;
/** An agent's version string: at most 64 printable characters (e.g. "0.1.0", "1.2.0-rc.1+abc"). */
const versionPattern = /^[\x21-\x7e]{0,64}$/;

/** NodeService: agents register and heartbeat (DESIGN §4). */
export function nodeService(nodes: NodeRegistry, _clock: Clock, coordinatorEpoch: bigint): ServiceImpl<typeof NodeService> {
  return {
    async register(req) {
      if (!idPattern.test(req.nodeId)) throw invalidArgument("node_id", `"${req.nodeId.slice(0, 64)}" is not a valid node id`);
      if (!addressPattern.test(req.address)) throw invalidArgument("address", `must be host:port, got "${req.address.slice(0, 64)}"`);
      if (!versionPattern.test(req.version)) throw invalidArgument("version", `at most 64 printable characters, got "${req.version.slice(0, 64)}"`);
      const existing = nodes.get(req.nodeId);
      if (existing?.embedded === true) {
        // The embedded agent re-registers in process; keep its in-process client.
        nodes.register({ nodeId: req.nodeId, address: existing.address, labels: req.labels, gpus: req.gpus, bootEpoch: req.bootEpoch, embedded: true, client: existing.client, version: req.version });
      } else {
        nodes.register({ nodeId: req.nodeId, address: req.address, labels: req.labels, gpus: req.gpus, bootEpoch: req.bootEpoch, version: req.version });
      }
      return { coordinatorEpoch, heartbeatIntervalMs: 1_000 };
    },
    async heartbeat(req) {
      if (!idPattern.test(req.nodeId)) throw invalidArgument("node_id", `"${req.nodeId.slice(0, 64)}" is not a valid node id`);
      if (req.backends.length > maxInventory) throw invalidArgument("backends", `at most ${String(maxInventory)} entries`);
      const known = nodes.heartbeat({ nodeId: req.nodeId, bootEpoch: req.bootEpoch, sequence: req.sequence, backends: req.backends, orphans: req.orphans, resources: req.resources });
      return { registerRequired: !known, coordinatorEpoch };
    },
  };
}
