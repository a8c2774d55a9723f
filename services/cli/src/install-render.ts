/**
 * What `warden install` writes, as text: the configs and the systemd units.
 * Pure (no I/O): install.ts gathers the facts (where node and warden are,
 * which groups exist) and writes the files.
 */
import { invalidArgument } from "@warden/common";

/** Where one installation's files live, all absolute (under --prefix). */
export interface InstallPaths {
  readonly etcDir: string;
  readonly certsDir: string;
  readonly stateDir: string;
  readonly config: string;
  readonly unit: string;
}

export interface UnitFacts {
  /** The node binary that runs warden (process.execPath): no PATH lookup, so an nvm-installed node works. */
  readonly node: string;
  /** The installed warden entry point. */
  readonly warden: string;
  readonly user: string;
  readonly group: string;
  readonly paths: InstallPaths;
  /** True when the state dir is systemd's /var/lib/<name> (prefix "/"): StateDirectory= makes and owns it. */
  readonly systemStateDir: boolean;
}

/** Groups an agent joins when they exist here: GPU device nodes are usually group video or render. */
export const gpuGroups = ["video", "render"] as const;

/** Characters a path may hold in a unit line: no quoting needed, no systemd specifiers (%) or variables ($). */
const unitSafePath = /^\/[A-Za-z0-9/._+@:-]{0,4095}$/;

/** A path for a unit's command line; anything that would need systemd quoting or escaping is refused, naming the field. */
export function unitPath(path: string, field: string): string {
  if (!unitSafePath.test(path)) throw invalidArgument(field, `"${path.slice(0, 80)}" must be an absolute path of letters, digits and / . _ + @ : - (at most 4096 characters) to go into a systemd unit`);
  return path;
}

/** Under a home directory: ProtectHome=true would hide it from the service (an nvm-installed node lives in ~/.nvm). */
function underHome(path: string): boolean {
  return /^\/(home|root|run\/user)(\/|$)/.test(path);
}

function protectHome(f: UnitFacts, dflt: "true" | "read-only"): string[] {
  const home = [f.node, f.warden, f.paths.etcDir, f.paths.stateDir].filter(underHome);
  if (home.length === 0) return [`ProtectHome=${dflt}`];
  return [`# ${home.join(", ")} under a home directory: readable, not hidden (the service user must be able to reach it).`, "ProtectHome=read-only"];
}

function stateLines(f: UnitFacts, name: string): string[] {
  if (f.systemStateDir) return [`# ${f.paths.stateDir}, owned by User=; matches stateDir in the config.`, `StateDirectory=${name}`, "StateDirectoryMode=0700"];
  return [`# ${f.paths.stateDir} (made by warden install, owned by User=); matches stateDir in the config.`, `ReadWritePaths=${unitPath(f.paths.stateDir, "--prefix")}`];
}

/** PrivateTmp=true would give the service an empty /tmp: a prefix there (a test, a trial) would vanish. */
function privateTmp(f: UnitFacts): string[] {
  const tmp = [f.paths.etcDir, f.paths.stateDir].filter((p) => /^\/(var\/)?tmp(\/|$)/.test(p));
  return tmp.length === 0 ? ["PrivateTmp=true"] : [`# ${f.paths.etcDir} under /tmp: no PrivateTmp= (it would hide the config from the service).`];
}

function command(f: UnitFacts, args: readonly string[], nodeFlags: readonly string[] = []): string {
  return [unitPath(f.node, "node binary"), ...nodeFlags, unitPath(f.warden, "warden path"), ...args].join(" ");
}

/**
 * The coordinator's V8 young generation: 64 MiB semi-spaces instead of node's
 * 16. Every heartbeat leaves short-lived garbage (its decoded message, the
 * stream's promises); with a larger young generation V8 collects it less
 * often and promotes less of it, about 10 % less CPU per heartbeat at 1 000
 * nodes for about 30 MiB more memory (test/bench/swarm.md).
 */
export const coordinatorNodeFlags = ["--max-semi-space-size=64"] as const;

const header = (what: string, rerun: string): string[] => [
  `# ${what}, rendered by \`warden install\`: it names this machine's node and warden binaries, so`,
  `# after moving either (a new node, another npm prefix) run \`${rerun}\` again.`,
];

/** The coordinator's unit: the journal under its state dir, SIGHUP re-reads models and policy. */
export function renderCoordinatorUnit(f: UnitFacts): string {
  const cfg = unitPath(f.paths.config, "--prefix");
  return [
    ...header("Warden coordinator", "warden install coordinator"),
    "[Unit]",
    "Description=Warden coordinator (placement, routing, eviction, audit)",
    "Wants=network-online.target",
    "After=network-online.target nats-server.service",
    "",
    "[Service]",
    "Type=simple",
    `User=${f.user}`,
    `Group=${f.group}`,
    // Runs as User=: a certificate the service cannot read fails here, once, not in a restart loop.
    `ExecStartPre=${command(f, ["coordinator", "--check-config", "--config", cfg])}`,
    "# --max-semi-space-size: a larger V8 young generation, less garbage-collection CPU under many nodes.",
    `ExecStart=${command(f, ["coordinator", "--config", cfg, "--log-json"], coordinatorNodeFlags)}`,
    "ExecReload=/bin/kill -HUP $MAINPID",
    "# A coordinator never stops backends (the agents own them): plain SIGTERM is a clean stop.",
    "KillSignal=SIGTERM",
    "TimeoutStopSec=30s",
    "Restart=on-failure",
    "RestartSec=2s",
    ...stateLines(f, "warden"),
    "LimitNOFILE=65536",
    "NoNewPrivileges=true",
    "ProtectSystem=strict",
    ...protectHome(f, "true"),
    ...privateTmp(f),
    "",
    "[Install]",
    "WantedBy=multi-user.target",
    "",
  ].join("\n");
}

/** The agent's unit: KillMode=process so the backends outlive an agent restart and are adopted. */
export function renderAgentUnit(f: UnitFacts & { readonly coordinator: string; readonly groups: readonly string[] }): string {
  const cfg = unitPath(f.paths.config, "--prefix");
  const groups = gpuGroups.filter((g) => f.groups.includes(g));
  return [
    ...header("Warden node agent", "warden install agent"),
    "[Unit]",
    "Description=Warden node agent (starts and stops this node's model backends)",
    "Wants=network-online.target",
    "After=network-online.target",
    "",
    "[Service]",
    "Type=simple",
    `User=${f.user}`,
    `Group=${f.group}`,
    groups.length === 0 ? `# No ${gpuGroups.join(" or ")} group on this machine: no SupplementaryGroups= (systemd refuses to start with an unknown group).` : "# GPU device nodes are usually group video/render (only the groups that exist here).",
    ...(groups.length === 0 ? [] : [`SupplementaryGroups=${groups.join(" ")}`]),
    `ExecStartPre=${command(f, ["agent", "--check-config", "--config", cfg])}`,
    `ExecStart=${command(f, ["agent", "--config", cfg, "--coordinator", checkCoordinator(f.coordinator)])}`,
    "# Only the agent is signalled on stop or restart: its backends keep running (and keep their",
    "# VRAM and loaded weights) and the next agent adopts them from its records in the state dir.",
    "KillMode=process",
    "KillSignal=SIGTERM",
    "TimeoutStopSec=30s",
    "Restart=on-failure",
    "RestartSec=2s",
    ...stateLines(f, "warden-agent"),
    "Environment=LOG_LEVEL=info",
    "LimitNOFILE=65536",
    "NoNewPrivileges=true",
    "ProtectSystem=full",
    ...protectHome(f, "read-only"),
    ...privateTmp(f),
    "",
    "[Install]",
    "WantedBy=multi-user.target",
    "",
  ].join("\n");
}

const addrPattern = /^[A-Za-z0-9.[\]:-]{1,253}:[0-9]{1,5}$/;

/** --coordinator: 1..8 host:port, comma-separated (HA members), each safe on a unit's command line. */
export function checkCoordinator(v: string): string {
  const parts = v.split(",");
  if (parts.length > 8 || parts.some((p) => !addrPattern.test(p))) throw invalidArgument("--coordinator", `must be 1..8 host:port, comma-separated, got "${v.slice(0, 80)}"`);
  return v;
}

export interface CoordinatorConfigFacts {
  readonly listen: string;
  readonly paths: InstallPaths;
}

/** The coordinator's config: mutual TLS with the certificates install made, and one smoke-test model. */
export function renderCoordinatorConfig(f: CoordinatorConfigFacts): string {
  const c = f.paths.certsDir;
  return [
    `# Written by \`warden install coordinator\` (never overwritten: edit it, then`,
    `#   warden coordinator --check-config --config ${f.paths.config}`,
    `# and \`systemctl reload warden-coordinator\` for models and policy).`,
    `listen: ${f.listen}`,
    "tls:                               # mutual TLS: agents and the CLI present certificates this CA signed",
    `  cert: ${c}/coordinator.pem`,
    `  key: ${c}/coordinator-key.pem`,
    `  ca: ${c}/ca.pem`,
    `stateDir: ${f.paths.stateDir}`,
    "embeddedAgent: false               # agents run on the GPU nodes (warden-agent.service)",
    "placement: binpack",
    "models:",
    "  - id: smoke                      # backend-sim, shipped in every agent: `warden predict smoke hello` checks the path end to end",
    "    backend: backend-sim           # replace with your models (backend = a catalog name in the agents' configs)",
    "",
  ].join("\n");
}

export interface AgentConfigFacts {
  readonly nodeId: string;
  readonly listen: string;
  readonly advertise: string;
  readonly paths: InstallPaths;
  /** nvidia-smi's absolute path, "" when this machine has none (no GPU inventory). */
  readonly nvidiaSmi: string;
}

/** The agent's config: its own certificate (bound to its node id), the CA, and backend-sim in the catalog. */
export function renderAgentConfig(f: AgentConfigFacts): string {
  const c = f.paths.certsDir;
  return [
    `# Written by \`warden install agent\` (never overwritten: edit it, then`,
    `#   warden agent --check-config --config ${f.paths.config}`,
    `# and \`systemctl restart warden-agent\`; its backends keep running and are adopted).`,
    `nodeId: ${f.nodeId}`,
    `listen: ${f.listen}`,
    `advertiseAddress: ${f.advertise}     # the coordinator dials this`,
    "tls:",
    `  cert: ${c}/${f.nodeId}.pem`,
    `  key: ${c}/${f.nodeId}-key.pem`,
    `  ca: ${c}/ca.pem`,
    `stateDir: ${f.paths.stateDir}`,
    "ports: { min: 41000, max: 41999 }  # backends bind 127.0.0.1 in this range",
    `nvidiaSmi: "${f.nvidiaSmi}"`,
    "catalog:",
    "  backend-sim:",
    "    builtin: backend-sim           # the simulator shipped in the package: a smoke test without a GPU",
    "",
  ].join("\n");
}
