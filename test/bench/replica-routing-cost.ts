/**
 * The per-call routing cost of the loader with many ready replicas of one
 * model, in-process (no I/O): a real `Loader` over stub ports, its replicas
 * adopted as an inventory would report them. `Loader.acquire` is what the
 * coordinator calls per inference call (routed-call.ts); the pure choice
 * inside it is `pickReplica` (replica-routing.ts: the head of the routing
 * order, replica-routes.ts), called by acquire and by its ensureLoaded. The
 * full scan `chooseReplica` (the per-call choice before the order was kept)
 * is timed too, for reference.
 */
import { ManualClock, createUlidFactory, seededRng } from "@warden/common";
import { Loader, modelSpec, type BackendHandle } from "@warden/loader";
import type { LoaderState } from "../../packages/loader/src/loader-state.js";
import { chooseReplica, pickReplica } from "../../packages/loader/src/replica-routing.js";

const handle: BackendHandle = { close: () => {} };
const model = "m";

/** A loader holding `replicas` ready replicas of model "m", spread over 10 nodes. */
export function loaderWithReplicas(replicas: number): Loader {
  const clock = new ManualClock();
  const rng = seededRng(42);
  // targetInFlight high: no scale-up is ever attempted (every replica is adopted, none loaded).
  const spec = modelSpec({ id: model, backend: "sim", replicas: { min: 0, max: replicas, targetInFlight: 1_000_000, scaleDownAfterMs: 3_600_000 } });
  const loader = new Loader<BackendHandle>({
    clock,
    rng,
    sleep: async () => {},
    agents: { agent: () => undefined, isLocal: () => false, isReachable: () => true },
    backends: { connect: () => handle },
    journal: { recordStopIntent: async () => {}, clearStopIntent: async () => {} },
    events: { emit: () => {}, emitDurable: async () => {} },
    placement: { choose: () => ({ nodeId: undefined, reason: "bench: every replica is adopted" }) },
    inventories: { findModel: () => ({ t: "absent" }) },
    mintIncarnation: createUlidFactory(clock, rng),
    models: [spec],
    policy: { limitPerNode: 1_000 },
  });
  const ulid = createUlidFactory(clock, rng);
  for (let i = 0; i < replicas; i++) {
    if (!loader.adoptRemoteOnly(spec, `n${String(i % 10)}`, `10.0.${String(i % 10)}.1:${String(5000 + i)}`, ulid())) throw new Error(`replica ${String(i)} not adopted`);
  }
  return loader;
}

/** ns per `acquire` + `complete`, `iterations` calls back to back, with `inFlight` other calls held open meanwhile. */
export async function acquireCostNs(loader: Loader, iterations: number, inFlight: number): Promise<number> {
  const signal = new AbortController().signal;
  // Calls kept in flight, so the choice is among unequal replicas (least in flight wins).
  const held = await Promise.all(Array.from({ length: inFlight }, () => loader.acquire(model, signal)));
  const t = process.hrtime.bigint();
  for (let i = 0; i < iterations; i++) (await loader.acquire(model, signal)).complete();
  const ns = Number(process.hrtime.bigint() - t) / iterations;
  for (const l of held) l.complete();
  return ns;
}

/** ns per pure routing choice, `iterations` back to back: `pickReplica` (per call today) or the full scan `chooseReplica`. */
export function chooseCostNs(loader: Loader, iterations: number, how: "pick" | "scan"): number {
  // The loader's state is private to it; the bench reads it to time the choice alone.
  const s = (loader as unknown as { readonly s: LoaderState<BackendHandle> }).s;
  let picked = 0;
  const t = process.hrtime.bigint();
  if (how === "pick") for (let i = 0; i < iterations; i++) picked += pickReplica(s, model) === undefined ? 0 : 1;
  else for (let i = 0; i < iterations; i++) picked += chooseReplica(s, model).best === undefined ? 0 : 1;
  const ns = Number(process.hrtime.bigint() - t) / iterations;
  if (picked !== iterations) throw new Error("bench: no replica chosen");
  return ns;
}
