import { formatDurationMs } from "@warden/common";
import type { GetHaStatusResponse } from "@warden/proto";
import { table } from "./render.js";

/**
 * `warden ha status`: the lease as the answering coordinator sees it, then one
 * row per member (itself first, then the others seen within 30 s).
 */
export function haStatusText(s: GetHaStatusResponse): string {
  if (!s.enabled) return "HA is off: this coordinator runs without ha: (single machine)";
  const lines = [
    `leader   ${s.leaderHolder === "" ? "(none known)" : `${s.leaderHolder} at ${s.leaderAddress === "" ? "?" : s.leaderAddress}`}`,
    // Where the OpenAI API and the dashboard are served now (a standby's HTTP port names it too).
    ...(s.leaderHolder === "" ? [] : [`http     ${s.leaderHttpUrl === "" ? "(no HTTP listener known)" : s.leaderHttpUrl}`]),
    `epoch    ${String(s.epoch)}`,
    `lease    changed ${formatDurationMs(Number(s.leaseAgeMs))} ago`,
    `quorum   ${s.quorum ? "yes" : "NO (evictions and loads paused on the leader)"}`,
    `takeovers by this member: ${String(s.takeovers)}`,
    "",
  ];
  const members = [...(s.self === undefined ? [] : [{ m: s.self, self: true }]), ...s.standbys.map((m) => ({ m, self: false }))];
  lines.push(
    table(
      ["HOLDER", "ADDRESS", "HTTP", "ROLE", "LAST SEEN"],
      members.map(({ m, self }) => [self ? `${m.holder} (this)` : m.holder, m.address, m.httpUrl === "" ? "-" : m.httpUrl, m.role, self ? "now" : `${formatDurationMs(Number(m.lastSeenMs))} ago`]),
    ),
  );
  return lines.join("\n");
}
