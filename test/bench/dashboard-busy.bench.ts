/**
 * How soon the dashboard's stream says an instance went busy: from sending a
 * call (HTTP /v1/completions to a backend-sim that holds it) to the `busy`
 * frame naming the instance with a call in flight, read from the stream as
 * the page reads it, against a real `warden up` (embedded agent). Baseline,
 * the same calls in the same run: to the first snapshot frame showing the
 * call in flight (what the page waited for before busy frames: the 2 s
 * refresh). Median of 15; each call is cancelled and its idle frame awaited
 * before the next.
 */
import { median, type BenchResult } from "./bench-result.js";
import { simModel } from "../support/coordinator-harness.js";
import { startDashboardRig } from "../support/dashboard-flow.js";
import { parseSse } from "../../services/coordinator/src/http/dashboard/sse-parse.js";

const runs = 15;

interface Frame {
  readonly event: string;
  readonly data: string;
  readonly atMs: number;
}

export async function run(): Promise<BenchResult[]> {
  const rig = await startDashboardRig({ extraModels: [simModel("slow", { memoryEstimate: "256MiB", knobs: { predict_delay_ms: 60_000 } })] });
  const stream = new AbortController();
  try {
    const incarnation = (await rig.admin.loadModel({ model: "slow" }, { timeoutMs: 60_000 })).instance?.incarnation ?? "";
    const res = await fetch(`${rig.url}/api/dashboard/stream`, { headers: { authorization: `Bearer ${rig.tokens.viewer}` }, signal: stream.signal });
    const reader = (res.body as ReadableStream<Uint8Array>).pipeThrough(new TextDecoderStream()).getReader();
    const frames: Frame[] = [];
    let wake: (() => void) | undefined;
    void (async () => {
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read().catch(() => ({ value: undefined, done: true }));
        if (done) return;
        const parsed = parseSse(buf + (value ?? ""));
        buf = parsed.rest;
        const atMs = performance.now();
        for (const m of parsed.messages) frames.push({ event: m.event, data: m.data, atMs });
        wake?.();
      }
    })();
    const inFlightIn = (f: Frame): number | undefined => {
      if (f.event === "busy") return (JSON.parse(f.data) as { instances: { incarnation: string; inFlight: number }[] }).instances.find((i) => i.incarnation === incarnation)?.inFlight;
      if (f.event === "snapshot") return (JSON.parse(f.data) as { instances: { incarnation: string; inFlight: number }[] }).instances.find((i) => i.incarnation === incarnation)?.inFlight;
      return undefined;
    };
    /** The first frame of `event` from `from` on whose count for the instance passes `ok`. */
    const awaitFrame = async (from: number, event: string, ok: (n: number) => boolean): Promise<Frame> => {
      const deadline = performance.now() + 60_000;
      for (let i = from; ; ) {
        for (; i < frames.length; i++) {
          const f = frames[i] as Frame;
          const n = f.event === event ? inFlightIn(f) : undefined;
          if (n !== undefined && ok(n)) return f;
        }
        if (performance.now() > deadline) throw new Error(`no ${event} frame in 60 s`);
        await new Promise<void>((r) => {
          wake = r;
          setTimeout(r, 1_000);
        });
      }
    };
    const busyMs: number[] = [];
    const snapshotMs: number[] = [];
    for (let i = 0; i < runs; i++) {
      const from = frames.length;
      const call = new AbortController();
      const t0 = performance.now();
      const done = fetch(`${rig.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${rig.tokens.inference}` }, body: JSON.stringify({ model: "slow", prompt: "hold" }), signal: call.signal }).then((r) => r.text()).catch(() => undefined);
      const [busy, snap] = await Promise.all([awaitFrame(from, "busy", (n) => n > 0), awaitFrame(from, "snapshot", (n) => n > 0)]);
      busyMs.push(busy.atMs - t0);
      snapshotMs.push(snap.atMs - t0);
      const idleFrom = frames.length;
      call.abort();
      await done;
      await awaitFrame(idleFrom, "busy", (n) => n === 0);
    }
    process.stderr.write(`busy frame: ${busyMs.map((x) => x.toFixed(1)).join(", ")} ms\nsnapshot: ${snapshotMs.map((x) => x.toFixed(0)).join(", ")} ms\n`);
    return [{ name: `dashboard busy state, call sent → stream says busy (median of ${String(runs)})`, baseline: "the first snapshot showing it (2 s refresh)", ours: median(busyMs), baselineValue: median(snapshotMs), unit: "ms", higherIsBetter: false }];
  } finally {
    stream.abort();
    await rig.close();
  }
}
