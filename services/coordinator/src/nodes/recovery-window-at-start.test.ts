import { describe, expect, it } from "vitest";
import { ManualClock, type Logger } from "@warden/common";
import type { NodeSettlement } from "@warden/loader";
import { startRecoveryWindow } from "./recovery-window-at-start.js";

// The wiring of the recovery window at start: the loader's node reports and
// losses reach it, its one timer is the earliest deadline, close() cancels it.

function fixture(nodes: readonly string[], windowMs: number) {
  const clock = new ManualClock();
  const logged: { msg: string; meta: Record<string, unknown> }[] = [];
  const log = { info: (msg: string, meta: Record<string, unknown> = {}) => logged.push({ msg, meta }), debug: () => {}, warn: () => {}, error: () => {}, child: () => log } as unknown as Logger;
  let listener: ((nodeId: string, how: NodeSettlement) => void) | undefined;
  const loader = {
    journalReplicas: {
      onNodeSettled: (l: typeof listener) => {
        listener = l;
      },
      list: () => [],
    },
  } as unknown as Parameters<typeof startRecoveryWindow>[0]["loader"];
  let opened = 0;
  const cancel = startRecoveryWindow({ loader, clock, log, windowMs, journaledNodes: nodes, open: () => opened++ });
  return { clock, logged, cancel, opened: () => opened, settle: (nodeId: string, how: NodeSettlement = "reported") => listener?.(nodeId, how), listening: () => listener !== undefined };
}

describe("startRecoveryWindow", () => {
  it("opens when the journal's last node reports, long before the window; the log says why", () => {
    const f = fixture(["a", "b", "a", ""], 600_000);
    f.clock.advance(100);
    f.settle("a");
    f.settle("zzz");
    expect(f.opened()).toBe(0);
    f.settle("b", "lost");
    expect(f.opened()).toBe(1);
    expect(f.listening()).toBe(false);
    expect(f.clock.pendingTimers()).toBe(0);
    expect(f.logged.find((l) => l.msg === "recovery window over")?.meta).toMatchObject({ cause: "all-reported", afterMs: 100, journaledNodes: 2, notReported: [] });
  });

  it("a node that never reports: opens at the window's end, naming it", () => {
    const f = fixture(["a", "b"], 3_000);
    f.settle("a");
    f.clock.advance(2_999);
    expect(f.opened()).toBe(0);
    f.clock.advance(1);
    expect(f.opened()).toBe(1);
    expect(f.logged.find((l) => l.msg === "recovery window over")?.meta).toMatchObject({ cause: "deadline", notReported: ["b"] });
  });

  it("no node named: the fixed wait, as before; a zero window opens at once", () => {
    const f = fixture([], 3_000);
    expect(f.listening()).toBe(false);
    f.clock.advance(2_999);
    expect(f.opened()).toBe(0);
    f.clock.advance(1);
    expect(f.opened()).toBe(1);
    expect(fixture(["a"], 0).opened()).toBe(1);
  });

  it("close() cancels the timer and the listener", () => {
    const f = fixture(["a"], 3_000);
    f.cancel();
    expect(f.listening()).toBe(false);
    f.clock.advance(10_000);
    expect(f.opened()).toBe(0);
  });
});
