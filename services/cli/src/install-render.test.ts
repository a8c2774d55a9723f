import { describe, expect, it } from "vitest";
import { renderAgentUnit, renderCoordinatorUnit, type InstallPaths, type UnitFacts } from "./install-render.js";

const paths = (stateName: string, role: string): InstallPaths => ({
  etcDir: "/etc/warden",
  certsDir: "/etc/warden/certs",
  stateDir: `/var/lib/${stateName}`,
  config: `/etc/warden/${role}.yaml`,
  unit: `/etc/systemd/system/warden-${role}.service`,
});
const facts = (o: Partial<UnitFacts> = {}): UnitFacts => ({ node: "/usr/bin/node", warden: "/usr/lib/node_modules/warden/bin/warden.js", user: "warden", group: "warden", paths: paths("warden-agent", "agent"), systemStateDir: true, ...o });
const lines = (unit: string, key: string): string[] => unit.split("\n").filter((l) => l.startsWith(`${key}=`));

describe("the rendered systemd units", () => {
  it("run node and warden by absolute path (no /usr/bin/env: an nvm node is not on systemd's PATH)", () => {
    const nvm = "/home/alice/.nvm/versions/node/v24.1.0/bin/node";
    const unit = renderCoordinatorUnit(facts({ node: nvm, paths: paths("warden", "coordinator") }));
    expect(unit).not.toContain("/usr/bin/env");
    expect(lines(unit, "ExecStart")).toEqual([`ExecStart=${nvm} --max-semi-space-size=64 /usr/lib/node_modules/warden/bin/warden.js coordinator --config /etc/warden/coordinator.yaml --log-json`]);
    // A node under /home must stay reachable: ProtectHome=true would hide it.
    expect(lines(unit, "ProtectHome")).toEqual(["ProtectHome=read-only"]);
    expect(lines(renderCoordinatorUnit(facts({ paths: paths("warden", "coordinator") })), "ProtectHome")).toEqual(["ProtectHome=true"]);
  });

  it("name the coordinator the agent was installed for", () => {
    const unit = renderAgentUnit({ ...facts(), coordinator: "10.0.0.2:50051,10.0.0.3:50051", groups: [] });
    expect(lines(unit, "ExecStart")).toEqual(["ExecStart=/usr/bin/node /usr/lib/node_modules/warden/bin/warden.js agent --config /etc/warden/agent.yaml --coordinator 10.0.0.2:50051,10.0.0.3:50051"]);
    expect(unit).not.toContain("coordinator.example");
    expect(() => renderAgentUnit({ ...facts(), coordinator: "coord; rm -rf /", groups: [] })).toThrow(/--coordinator/);
  });

  it("join only the GPU groups that exist (systemd will not start a unit naming an unknown group)", () => {
    expect(lines(renderAgentUnit({ ...facts(), coordinator: "c:1", groups: ["video", "render"] }), "SupplementaryGroups")).toEqual(["SupplementaryGroups=video render"]);
    expect(lines(renderAgentUnit({ ...facts(), coordinator: "c:1", groups: ["video"] }), "SupplementaryGroups")).toEqual(["SupplementaryGroups=video"]);
    expect(lines(renderAgentUnit({ ...facts(), coordinator: "c:1", groups: [] }), "SupplementaryGroups")).toEqual([]);
  });

  it("use StateDirectory= for /var/lib and ReadWritePaths= (no PrivateTmp under /tmp) for a prefix", () => {
    expect(lines(renderAgentUnit({ ...facts(), coordinator: "c:1", groups: [] }), "StateDirectory")).toEqual(["StateDirectory=warden-agent"]);
    const p = { ...paths("warden-agent", "agent"), etcDir: "/tmp/r/etc/warden", stateDir: "/tmp/r/var/lib/warden-agent", config: "/tmp/r/etc/warden/agent.yaml" };
    const unit = renderAgentUnit({ ...facts({ paths: p, systemStateDir: false }), coordinator: "c:1", groups: [] });
    expect(lines(unit, "ReadWritePaths")).toEqual(["ReadWritePaths=/tmp/r/var/lib/warden-agent"]);
    expect(lines(unit, "StateDirectory")).toEqual([]);
    expect(lines(unit, "PrivateTmp")).toEqual([]);
  });

  it("refuse a path that would need quoting or carry a systemd specifier, naming it", () => {
    expect(() => renderCoordinatorUnit(facts({ node: "/opt/my node/bin/node" }))).toThrow(/node binary/);
    expect(() => renderCoordinatorUnit(facts({ warden: "/opt/%h/warden.js" }))).toThrow(/warden path/);
  });
});
