import type { ArtifactPull, BundleInstall } from "@warden/proto";
import type { EventInit } from "@warden/events";

/**
 * The audit event of a pull an agent completed (its heartbeat's
 * ArtifactPull, validated by node-report-limits.ts): `artifact.pulled` on the
 * node, with the model whose start pulled it.
 */
export function artifactPulledEvent(nodeId: string, p: ArtifactPull): EventInit {
  return {
    nodeId,
    model: p.model,
    payload: {
      case: "artifactPulled",
      value: {
        $typeName: "warden.v1.ArtifactPulled",
        sha256: Buffer.from(p.sha256).toString("hex"),
        sizeBytes: p.sizeBytes,
        path: p.path,
        backend: p.backend,
        bundleLayer: p.bundleLayer,
        origin: p.origin,
        sources: p.sources.map((s) => ({ $typeName: "warden.v1.ArtifactPullSource", peerNodeId: s.peerNodeId, bytes: s.bytes })),
        resumedBytes: p.resumedBytes,
        durationMs: p.durationMs,
      },
    },
  };
}

/**
 * The audit event of a bundle a start installed: `backend.installed` with the
 * start's incarnation and model and no actor (an operator's install carries
 * the caller instead, backend-bundles.ts).
 */
export function startInstalledEvent(nodeId: string, b: BundleInstall): EventInit {
  return {
    nodeId,
    model: b.model,
    payload: { case: "backendInstalled", value: { $typeName: "warden.v1.BackendInstalled", backend: b.backend, sha256: Buffer.from(b.sha256).toString("hex"), source: b.source, startIncarnation: b.incarnation } },
  };
}
