import { WardenError, backoffDelayMs, cryptoRng, isOciSource, parseOciReference, sleep, type BackoffPolicy, type Clock, type Logger, type Rng } from "@warden/common";
import type { BundleSpec } from "./backend-bundle-config.js";
import { isAborted } from "./is-aborted.js";
import { OciRegistryClient } from "./oci-registry.js";
import type { RegistryLoginLookup } from "./registry-auth.js";

/**
 * One catalog backend's bundle as the heartbeat reports it
 * (ArtifactCacheReport.bundles): installed, or what an install would pull.
 */
export interface BundleState {
  readonly backend: string;
  readonly installed: boolean;
  /** Bytes an install would download; 0 when installed; undefined when not known (an image whose manifest is not read yet). */
  readonly pullBytes: number | undefined;
}

/** What the report reads of the artifact cache: whether it holds a verified file (`final`) or an installed bundle. */
export interface BundleCacheView {
  has(sha256: string, kind: "final" | "bundle"): boolean;
}

/** One blob an install downloads: the tarball, or an image layer. */
export interface BundleBlob {
  readonly sha256: string;
  readonly sizeBytes: number;
}

/** Reads an image's layers (its manifest, verified against the pinned digest). */
export type ImageLayerLister = (spec: BundleSpec, signal: AbortSignal) => Promise<readonly BundleBlob[]>;

/** The registry's manifest, read as BundleInstaller reads it to install (with the registry's login, looked up per read so a reload applies). */
export function registryLayers(login?: RegistryLoginLookup): ImageLayerLister {
  return async (spec, signal) => {
    const ref = parseOciReference("bundle.source", spec.source);
    const client = new OciRegistryClient(ref, login?.(ref.host));
    return (await client.manifest(`sha256:${spec.sha256}`, signal)).layers;
  };
}

/**
 * The state of every catalog backend that names a bundle, in catalog order.
 * A tarball's bytes are its configured size; an image's the sum of its
 * layers' sizes once its manifest was read (undefined before); either less
 * the blobs the cache already holds (an install then only unpacks them).
 */
export function bundleStatesOf(catalog: Readonly<Record<string, { readonly bundle?: BundleSpec | undefined }>>, cache: BundleCacheView, blobsOf: (spec: BundleSpec) => readonly BundleBlob[] | undefined): BundleState[] {
  const out: BundleState[] = [];
  for (const [backend, entry] of Object.entries(catalog)) {
    const spec = entry.bundle;
    if (spec === undefined) continue;
    if (cache.has(spec.sha256, "bundle")) {
      out.push({ backend, installed: true, pullBytes: 0 });
      continue;
    }
    const blobs = blobsOf(spec);
    let pullBytes: number | undefined;
    if (blobs !== undefined) {
      pullBytes = 0;
      for (const b of blobs) if (!cache.has(b.sha256, "final")) pullBytes += b.sizeBytes;
    }
    out.push({ backend, installed: false, pullBytes });
  }
  return out;
}

export interface BundleReportOptions {
  readonly catalog: Readonly<Record<string, { readonly bundle?: BundleSpec | undefined }>>;
  readonly cache: BundleCacheView;
  /** @default registryLayers() (anonymous) */
  readonly listLayers?: ImageLayerLister;
  readonly clock: Clock;
  readonly logger: Logger;
  /** One manifest read. @default 30 000 */
  readonly manifestTimeoutMs?: number;
  /** Between failed manifest reads of one image. @default 1 s × 2 up to 5 min, 20 % jitter */
  readonly backoff?: BackoffPolicy;
  readonly rng?: Rng;
}

/**
 * The bundle states the heartbeat sends, with a version that changes only
 * when they do (so the list travels only then, as the digest set does).
 * Images' sizes come from their manifests, read in the background by
 * `resolve`: a heartbeat never waits on a registry, and an image whose
 * manifest is not read yet (registry down, not reached yet) reports an
 * unknown size.
 */
export class BundleReport {
  /** Manifest digest → its layers: a pinned manifest never changes, so each is read once. */
  private readonly layers = new Map<string, readonly BundleBlob[]>();
  private last = "";
  private version = 0;
  private readonly log: Logger;

  constructor(private readonly o: BundleReportOptions) {
    this.log = o.logger.child({ component: "bundle-report" });
  }

  /** The states now and their version (bumped when they differ from the previous call's). */
  snapshot(): { readonly version: number; readonly states: readonly BundleState[] } {
    const states = bundleStatesOf(this.o.catalog, this.o.cache, (spec) => this.blobsOf(spec));
    // ≤ 256 entries (the catalog's bound): a string compare per heartbeat is cheap.
    const key = JSON.stringify(states);
    if (key !== this.last) {
      this.last = key;
      this.version++;
    }
    return { version: this.version, states };
  }

  /** Whether any catalog entry names a bundle (else there is nothing to report). */
  any(): boolean {
    return Object.values(this.o.catalog).some((e) => e.bundle !== undefined);
  }

  /** Reads every image's manifest until each is read or `signal` aborts; retries a failure with backoff. */
  async resolve(signal: AbortSignal): Promise<void> {
    const images = new Map<string, BundleSpec>();
    for (const e of Object.values(this.o.catalog)) if (e.bundle !== undefined && isOciSource(e.bundle.source)) images.set(e.bundle.sha256, e.bundle);
    await Promise.all([...images.values()].map((spec) => this.resolveOne(spec, signal)));
  }

  private blobsOf(spec: BundleSpec): readonly BundleBlob[] | undefined {
    if (!isOciSource(spec.source)) return [{ sha256: spec.sha256, sizeBytes: spec.sizeBytes ?? 0 }];
    return this.layers.get(spec.sha256);
  }

  private async resolveOne(spec: BundleSpec, signal: AbortSignal): Promise<void> {
    const list = this.o.listLayers ?? registryLayers();
    const backoff = this.o.backoff ?? { initialMs: 1_000, factor: 2, maxMs: 300_000, jitter: 0.2 };
    for (let attempt = 0; !signal.aborted; attempt++) {
      try {
        const layers = await list(spec, AbortSignal.any([signal, AbortSignal.timeout(this.o.manifestTimeoutMs ?? 30_000)]));
        this.layers.set(spec.sha256, layers);
        return;
      } catch (err) {
        if (isAborted(signal)) return;
        const e = WardenError.from(err);
        const delayMs = backoffDelayMs(backoff, attempt, this.o.rng ?? cryptoRng);
        // The first failure is worth a warning; the retries only at debug (a registry down for hours).
        const fields = { sha256: spec.sha256, source: spec.source.slice(0, 256), err: e.message, code: e.code, delayMs };
        if (attempt === 0) this.log.warn("cannot read a backend bundle's manifest; placement counts its size as unknown until it can", fields);
        else this.log.debug("backend bundle manifest read failed again", fields);
        await sleep(this.o.clock, delayMs, signal).catch(() => {});
      }
    }
  }
}
