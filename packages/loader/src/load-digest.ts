import type { HeldInstance } from "./loader-types.js";
import { loadRevision, type ModelSpec } from "./model-spec.js";
import type { AgentDirectory, BackendHandle } from "./ports.js";

const digests = new WeakMap<ModelSpec, string>();
const fnvPrime = 0x100000001b3n;
const mask64 = (1n << 64n) - 1n;

/**
 * A short, stable digest of a model's load settings ({@link loadRevision}):
 * 64-bit FNV-1a over its UTF-16 code units, 16 hex digits. Sent with every
 * StartBackend and kept by the agent with its record, so its inventory says
 * which settings a running instance was started with: a coordinator that
 * adopts an instance after a restart or a takeover tells a stale one from a
 * current one and goes on with the rollout. Not a security boundary (an
 * agent's word, like the rest of its inventory). Cached per spec object.
 */
export function loadDigest(spec: ModelSpec): string {
  let d = digests.get(spec);
  if (d === undefined) {
    let h = 0xcbf29ce484222325n;
    const text = loadRevision(spec);
    for (let i = 0; i < text.length; i++) h = ((h ^ BigInt(text.charCodeAt(i))) * fnvPrime) & mask64;
    d = h.toString(16).padStart(16, "0");
    digests.set(spec, d);
  }
  return d;
}

/** The digest of the settings `h` was started with: the one its node reported when it was adopted, else its spec's. */
export function startedDigest<H extends BackendHandle>(h: HeldInstance<H>): string {
  return h.startedWith ?? loadDigest(h.spec);
}

/**
 * Whether `h` runs older load settings than `current`, or (asked of `agents`)
 * a backend bundle its node no longer names: a rollout replaces it.
 */
export function isStale<H extends BackendHandle>(h: HeldInstance<H>, current: ModelSpec, agents?: Pick<AgentDirectory, "bundleStale">): boolean {
  return startedDigest(h) !== loadDigest(current) || agents?.bundleStale?.(h.nodeId, h.incarnation, current.backend) === true;
}
