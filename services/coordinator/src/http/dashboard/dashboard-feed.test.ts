import { createServer, get, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { EventSchema, type Event } from "@warden/proto";
import { ManualClock, nullLogger } from "@warden/common";
import { DashboardFeed, preparedForMs, type EventSource } from "./dashboard-feed.js";
import type { DashboardSnapshot } from "./dashboard-view.js";

/** The hub's watch: the events `emit` sends, while the watch's signal is not aborted. */
class TestHub implements EventSource {
  watching = 0;
  private readonly waiters = new Set<(e: Event) => void>();
  emit(e: Event): void {
    for (const w of this.waiters) w(e);
  }
  async *watch(_filter: Record<string, never>, signal: AbortSignal): AsyncIterable<Event> {
    this.watching++;
    const queue: Event[] = [];
    let wake: (() => void) | undefined;
    const push = (e: Event): void => {
      queue.push(e);
      wake?.();
    };
    this.waiters.add(push);
    const aborted = (): void => wake?.();
    signal.addEventListener("abort", aborted);
    try {
      while (!signal.aborted) {
        const e = queue.shift();
        if (e !== undefined) yield e;
        else await new Promise<void>((r) => (wake = r));
      }
    } finally {
      this.waiters.delete(push);
      signal.removeEventListener("abort", aborted);
      this.watching--;
    }
  }
}

async function until(what: string, fn: () => boolean, timeoutMs = 30_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!fn()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const closers: (() => void)[] = [];
afterEach(() => {
  for (const c of closers.splice(0)) c();
});

/** A feed behind a real HTTP server; `snapshots` counts the snapshots it took, each naming its number in `at`. */
async function rig(): Promise<{ feed: DashboardFeed; hub: TestHub; clock: ManualClock; snapshots: () => number; port: number }> {
  const hub = new TestHub();
  const clock = new ManualClock();
  let taken = 0;
  const snapshot = async (): Promise<DashboardSnapshot> => ({ at: String(++taken), nodes: [], instances: [], models: [] });
  const feed = new DashboardFeed({ hub, snapshot, clock, log: nullLogger, limits: { maxClients: 4, maxPendingBytes: 1 << 20 } });
  const server: Server = createServer((_req, res) => void feed.connect(res));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  closers.push(() => {
    feed.close();
    server.closeAllConnections();
    server.close();
  });
  return { feed, hub, clock, snapshots: () => taken, port: (server.address() as AddressInfo).port };
}

/** Opens a stream and collects its text. */
function stream(port: number): { text: () => string; close: () => void } {
  let text = "";
  let res: IncomingMessage | undefined;
  const req = get({ host: "127.0.0.1", port, path: "/" }, (r) => {
    res = r;
    r.setEncoding("utf8");
    r.on("data", (c: string) => (text += c));
  });
  req.on("error", () => undefined);
  closers.push(() => req.destroy());
  return { text: () => text, close: () => { res?.destroy(); req.destroy(); } };
}

const loaded = (model: string): Event => create(EventSchema, { id: model, model, payload: { case: "backendLoaded", value: {} } });

describe("DashboardFeed.prepare", () => {
  it("the next stream starts from the snapshot taken ahead, then every event since it began", async () => {
    const { feed, hub, snapshots, port } = await rig();
    feed.prepare();
    feed.prepare();
    // One snapshot ahead however often the page is asked for.
    expect(snapshots()).toBe(1);
    await until("the hub watch", () => hub.watching === 1);
    hub.emit(loaded("before-the-stream"));
    const s = stream(port);
    await until("the snapshot and the event", () => s.text().includes("before-the-stream"));
    expect(snapshots()).toBe(1);
    const text = s.text();
    expect(text.indexOf('"at":"1"')).toBeGreaterThan(-1);
    expect(text.indexOf('"at":"1"')).toBeLessThan(text.indexOf("before-the-stream"));
  });

  it("a snapshot taken ahead and not used is dropped after preparedForMs: the watch stops and the next stream takes a fresh one", async () => {
    const { feed, hub, clock, snapshots, port } = await rig();
    feed.prepare();
    await until("the hub watch", () => hub.watching === 1);
    clock.advance(preparedForMs);
    await until("the watch to stop", () => hub.watching === 0);
    const s = stream(port);
    await until("a snapshot", () => s.text().includes('"at":"2"'));
    expect(snapshots()).toBe(2);
  });
});
