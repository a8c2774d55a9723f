import { invalidArgument, parseHostPortList, parseMemoryBudget } from "@warden/common";
import { parseMaxReplicasPerModel, type AgentPlacementLimits } from "./agent-placement-limits.js";

/** Command line of `warden agent` / services/agent/src/main.ts. */
export interface AgentArgs {
  configPath: string;
  /** Coordinator NodeService addresses (1..8, the first tried first; HA: the agent follows the leader); no heartbeat when undefined. */
  coordinator: string[] | undefined;
  /** Overrides the config's `listen`. */
  listen: string | undefined;
  stopBackendsOnExit: boolean;
  /** host:port for Prometheus `/metrics`; off when undefined. */
  metrics: string | undefined;
  /** Validate the config, print the effective settings and exit without starting. */
  checkConfig: boolean;
  /** Allow plaintext on a non-loopback listen address (overrides the config). */
  insecure: boolean;
  /** Override the config's maxReplicasPerModel / memoryBudget (sent in Register). */
  maxReplicasPerModel: number | undefined;
  memoryBudget: AgentPlacementLimits["memoryBudget"];
  help: boolean;
}

export const agentUsage = `usage: node --import tsx services/agent/src/main.ts --config agent.yaml [--coordinator HOST:PORT[,HOST:PORT…]] [--listen HOST:PORT] [--stop-backends-on-exit]

Runs the Warden agent: serves AgentService (plus grpc.health.v1 and reflection),
adopts the backends recorded in its state dir, and heartbeats to the coordinator
when --coordinator is given.

  --config PATH            YAML config (see services/agent/README.md)
  --coordinator HOST:PORT[,HOST:PORT…]
                           coordinator NodeService address (Register + Heartbeat); with HA
                           coordinators list them all (1..8, comma-separated, first tried first):
                           the agent follows the leader and registers again when it changes
  --listen HOST:PORT       AgentService address (overrides the config's listen)
  --metrics HOST:PORT      serve Prometheus metrics at http://HOST:PORT/metrics
  --stop-backends-on-exit  on SIGTERM/SIGINT call Free (5 s cap) and stop every backend;
                           by default backends keep running and are adopted on restart
  --check-config           validate the config, print the effective settings, exit (0 valid, 2 not)
  --insecure               allow plaintext gRPC on a non-loopback --listen address; without it the
                           agent refuses to start there unless the config's tls (cert, key, ca) is set
  --max-replicas-per-model N  replicas of one model this node may hold, 1..1024 (overrides the config's
                           maxReplicasPerModel; default 1); an Admin SetNodeLimits override wins
  --memory-budget SIZE|PCT what placement may account on this node: "40GiB" or "80%" of its GPU
                           memory (RAM without GPUs); overrides the config's memoryBudget
  --help                   this text
`;

const hostPort = /^[A-Za-z0-9.\-[\]:]+:\d{1,5}$/;

/** Parses argv (without node and script). Throws INVALID_ARGUMENT naming the flag. */
export function parseAgentArgs(argv: readonly string[]): AgentArgs {
  const out: AgentArgs = { configPath: "", coordinator: undefined, listen: undefined, stopBackendsOnExit: false, metrics: undefined, checkConfig: false, insecure: false, maxReplicasPerModel: undefined, memoryBudget: undefined, help: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] ?? "";
    const [flag, inline] = a.startsWith("--") && a.includes("=") ? [a.slice(0, a.indexOf("=")), a.slice(a.indexOf("=") + 1)] : [a, undefined];
    const value = (): string => {
      const v = inline ?? argv[++i];
      if (v === undefined || v === "") throw invalidArgument(flag, "needs a value");
      return v;
    };
    switch (flag) {
      case "--help":
      case "-h":
        out.help = true;
        break;
      case "--config":
        out.configPath = value();
        break;
      case "--coordinator":
        out.coordinator = parseHostPortList(value(), "--coordinator");
        break;
      case "--listen":
        out.listen = value();
        if (!hostPort.test(out.listen)) throw invalidArgument("--listen", `must be host:port, got "${out.listen}"`);
        break;
      case "--stop-backends-on-exit":
        out.stopBackendsOnExit = true;
        break;
      case "--check-config":
        out.checkConfig = true;
        break;
      case "--insecure":
        out.insecure = true;
        break;
      case "--max-replicas-per-model":
        out.maxReplicasPerModel = parseMaxReplicasPerModel(value(), "--max-replicas-per-model");
        break;
      case "--memory-budget":
        out.memoryBudget = parseMemoryBudget(value(), "--memory-budget");
        break;
      case "--metrics":
        out.metrics = value();
        if (!hostPort.test(out.metrics)) throw invalidArgument("--metrics", `must be host:port, got "${out.metrics}"`);
        break;
      default:
        throw invalidArgument(a, "unknown argument");
    }
  }
  if (!out.help && out.configPath === "") throw invalidArgument("--config", "required");
  return out;
}
