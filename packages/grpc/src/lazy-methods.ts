import type { DescMethod, DescService } from "@bufbuild/protobuf";

/** Where a client built by `lazyMethods` keeps the function that makes one of its methods. */
const makeMethod = Symbol("makeMethod");

interface LazyHost {
  [makeMethod](m: DescMethod): unknown;
}

/** One prototype per service, shared by every client of it: only getters, no per-client state. */
const prototypes = new WeakMap<DescService, object>();

function own(target: object, name: string, value: unknown): void {
  Object.defineProperty(target, name, { value, writable: true, enumerable: true, configurable: true });
}

function prototypeOf(svc: DescService): object {
  let proto = prototypes.get(svc);
  if (proto !== undefined) return proto;
  proto = {};
  for (const m of svc.methods) {
    const name = m.localName;
    Object.defineProperty(proto, name, {
      enumerable: true,
      configurable: true,
      get(this: LazyHost): unknown {
        const fn = this[makeMethod](m);
        own(this, name, fn);
        return fn;
      },
      // Assigning a method (a wrapper, a test double) makes it the client's own, as on a plain object.
      set(this: object, value: unknown) {
        own(this, name, value);
      },
    });
  }
  prototypes.set(svc, proto);
  return proto;
}

/**
 * A client object whose per-method functions are made on first use and then
 * kept as its own properties: `base`'s properties (close, …) plus one method
 * per RPC of `svc`, made by `make`.
 *
 * Why: the coordinator holds a client for every backend it routes to and
 * every agent it commands — 10 000 backends at 1 000 nodes. The Backend
 * service has about fifty RPCs and a backend is mostly called through two
 * (Predict and PredictStream), so making every method up front cost about
 * 17 KiB of heap per client (170 MiB at 10 000 backends); a client whose
 * methods are never called now costs a few hundred bytes.
 *
 * A method read once (`client.predict`, destructuring, `typeof`) is made then
 * and stays, so behaviour is a plain object's; the one difference is that
 * `Object.keys` lists only methods already made — iterate `svc.methods` to
 * reach every method.
 */
export function lazyMethods(svc: DescService, base: Record<string, unknown>, make: (m: DescMethod) => unknown): object {
  const out = Object.create(prototypeOf(svc)) as LazyHost & Record<string, unknown>;
  Object.defineProperty(out, makeMethod, { value: make, enumerable: false });
  for (const [k, v] of Object.entries(base)) own(out, k, v);
  return out;
}
