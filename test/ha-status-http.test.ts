/**
 * `warden ha status` names each member's HTTP URL, real processes: a 3-server
 * nats-server JetStream cluster, two `warden coordinator --ha` members with
 * HTTP listeners, the real CLI. Both members' rows carry their URLs and the
 * leader's URL is the one the standby's HTTP port names; after kill -9 of the
 * leader, the survivor's row leads with its own URL.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { uniqueTag } from "./support/agent-harness.js";
import { simModel, until } from "./support/coordinator-harness.js";
import { cliHaStatus, type HaCoordinatorProcess } from "./support/ha-coordinator-process.js";
import { startHaFleet, type HaFleet } from "./support/ha-fleet.js";

interface Member {
  readonly proc: HaCoordinatorProcess;
  readonly url: string;
}

interface StatusRow {
  readonly holder: string;
  readonly role: string;
  readonly httpUrl: string;
}

interface StatusJson {
  readonly self: StatusRow;
  readonly standbys: readonly StatusRow[];
  readonly leaderHolder: string;
  readonly leaderHttpUrl: string;
}

let fleet: HaFleet | undefined;
const members: Member[] = [];

async function member(i: number, tag: string): Promise<Member> {
  const proc = await fleet!.member({ holder: `${tag}-${String(i)}`, http: true, config: { policy: { tickInterval: "100ms" }, models: [simModel("m")] } });
  return { proc, url: proc.httpUrl! };
}

const rows = (s: StatusJson): StatusRow[] => [s.self, ...s.standbys];
const status = async (m: Member): Promise<StatusJson | undefined> => (await cliHaStatus(m.proc.address).catch(() => undefined)) as StatusJson | undefined;

beforeAll(async () => {
  fleet = await startHaFleet("ha-status-http");
  const tag = uniqueTag("ha-st-http").slice(0, 30).replace(/[^A-Za-z0-9_-]/g, "-");
  members.push(...(await Promise.all([member(0, tag), member(1, tag)])));
}, 180_000);

afterAll(async () => {
  await fleet?.close();
}, 60_000);

describe("warden ha status shows each member's HTTP URL", { timeout: 240_000 }, () => {
  it("both members' rows carry their HTTP URLs and the leader's is the one the standby's HTTP names; after kill -9 of the leader the survivor leads with its URL", async () => {
    const [a, b] = members as [Member, Member];
    const byHolder = new Map(members.map((m) => [m.proc.holder, m]));
    // Until the standby has seen the leader announce itself (with its URL).
    const { leader, standby, seen } = await until("one leader, seen by the standby with both URLs", async () => {
      const [sa, sb] = await Promise.all([status(a), status(b)]);
      if (sa === undefined || sb === undefined) return undefined;
      const pick = sa.self.role === "leader" && sb.self.role === "standby" ? { leader: a, standby: b, seen: sb } : sb.self.role === "leader" && sa.self.role === "standby" ? { leader: b, standby: a, seen: sa } : undefined;
      if (pick === undefined || pick.seen.standbys.length !== 1 || pick.seen.leaderHttpUrl === "") return undefined;
      return pick;
    }, 90_000);

    // Each member logs the URL it announces when it starts.
    for (const m of members) expect(m.proc.lines.find((l) => l["msg"] === "ha member started")?.["httpUrl"]).toBe(m.url);
    // The standby's view: itself and the leader, each with the URL it listens on.
    expect(new Map(rows(seen).map((r) => [r.holder, r.httpUrl]))).toEqual(new Map(members.map((m) => [m.proc.holder, m.url])));
    expect(rows(seen).find((r) => r.role === "leader")?.holder).toBe(leader.proc.holder);
    expect(seen.leaderHolder).toBe(leader.proc.holder);
    expect(seen.leaderHttpUrl).toBe(leader.url);
    // The leader's own view names its URL as the leader's.
    const fromLeader = await until("the leader sees the standby", async () => {
      const s = await status(leader);
      return s !== undefined && s.standbys.length === 1 ? s : undefined;
    }, 60_000);
    expect(fromLeader.self).toMatchObject({ holder: leader.proc.holder, role: "leader", httpUrl: leader.url });
    expect(fromLeader.leaderHttpUrl).toBe(leader.url);
    expect(fromLeader.standbys[0]).toMatchObject({ holder: standby.proc.holder, role: "standby", httpUrl: standby.url });
    // The standby's HTTP answers name the same URL ha status shows.
    const refused = await fetch(`${standby.url}/v1/models`);
    expect(refused.status).toBe(503);
    expect(refused.headers.get("warden-leader")).toBe(seen.leaderHttpUrl);

    await leader.proc.kill();
    const after = await until("the survivor leads", async () => {
      const s = await status(standby);
      return s?.self.role === "leader" && s.leaderHolder === standby.proc.holder ? s : undefined;
    }, 120_000);
    expect(after.self).toMatchObject({ holder: standby.proc.holder, role: "leader", httpUrl: standby.url });
    expect(after.leaderHttpUrl).toBe(standby.url);
    expect(byHolder.get(after.leaderHolder)?.url).toBe(after.leaderHttpUrl);
    expect((await fetch(`${standby.url}/ha/leader`)).status).toBe(200);
  });
});
