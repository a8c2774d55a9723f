import { Readable } from "node:stream";
import { Code, WardenError, parseOciReference } from "@warden/common";
import { judgeHttpAnswer } from "./artifact-plan.js";
import type { ArtifactSource } from "./artifact-pull.js";
import { OciRegistryClient } from "./oci-registry.js";
import type { RegistryLoginLookup } from "./registry-auth.js";

/**
 * An `oci://host/repository[:tag][@sha256:…]` artifact: the registry blob
 * whose digest is the artifact's sha256. With a tag or digest the manifest is
 * resolved first and must list the blob (a layer or the config) with the
 * artifact's size, so a retagged image that no longer holds the file fails
 * NOT_FOUND instead of pulling a blob by chance. Resumes with Range like an
 * http source (registries serve blobs with Range). `loginFor` gives the
 * registry's credentials (registryAuthFile), looked up once per pull.
 */
export function ociBlobSource(source: string, sha256: string, sizeBytes: number, loginFor?: RegistryLoginLookup): ArtifactSource {
  const ref = parseOciReference("source", source);
  const registry = new OciRegistryClient(ref, loginFor?.(ref.host));
  let checked = ref.tag === undefined && ref.digest === undefined;
  return {
    async open(offset, signal) {
      if (!checked) {
        const m = await registry.manifest(ref.digest === undefined ? (ref.tag ?? "latest") : `sha256:${ref.digest}`, signal);
        const listed = [m.config, ...m.layers].find((d) => d.sha256 === sha256);
        if (listed === undefined) throw new WardenError(Code.NotFound, `the image's manifest (sha256:${m.sha256}) lists no blob sha256:${sha256}`);
        if (listed.sizeBytes !== sizeBytes) throw new WardenError(Code.DataLoss, `the manifest gives the blob ${String(listed.sizeBytes)} bytes, the artifact ${String(sizeBytes)}; the partial file was removed`);
        checked = true;
      }
      const res = await registry.blob(sha256, offset, signal);
      const length = res.headers.get("content-length");
      const v = judgeHttpAnswer({ offset, sizeBytes, status: res.status, contentRange: res.headers.get("content-range") ?? undefined, contentLength: length === null ? undefined : Number(length) });
      if (v.t !== "body") await res.body?.cancel();
      switch (v.t) {
        case "body": {
          if (res.body === null) throw new WardenError(Code.Unavailable, "the registry sent no body");
          const chunks = Readable.fromWeb(res.body);
          // A connection dropped before the pull iterates emits "error" with nobody listening yet: the iteration reports it.
          chunks.on("error", () => {});
          return { from: v.from, chunks };
        }
        case "restart":
          // Asked again from 0 by the pull (its partial is not a prefix of this blob's bytes as served).
          return this.open(0, signal);
        case "not-found":
          throw new WardenError(Code.NotFound, `${registry.describe()} has no blob sha256:${sha256} (HTTP ${String(res.status)})`);
        case "mismatch":
          throw new WardenError(Code.DataLoss, `${v.why}; the partial file was removed`);
        case "unavailable":
          throw new WardenError(Code.Unavailable, `the registry answered ${v.why}`);
      }
    },
  };
}
