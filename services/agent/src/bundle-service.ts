import { Code, WardenError, invalidArgument } from "@warden/common";
import type { ServiceImpl } from "@warden/grpc";
import type { AgentService, BundleInfo } from "@warden/proto";
import type { BundleSpec } from "./backend-bundle-config.js";
import type { AgentContext } from "./agent-context.js";
import { checkId } from "./request-validation.js";

type Impl = ServiceImpl<typeof AgentService>;
type BundleInfoInit = Omit<BundleInfo, "$typeName" | "$unknown">;

/** Live processes of catalog entries installed from `sha256` (any entry naming that digest). */
function liveUsers(ctx: AgentContext, sha256: string): { total: number; byBackend: Map<string, number> } {
  const byBackend = new Map<string, number>();
  let total = 0;
  for (const p of ctx.table.values()) {
    if (p.state().t === "exited") continue;
    const entry = Object.hasOwn(ctx.config.catalog, p.id.backend) ? ctx.config.catalog[p.id.backend] : undefined;
    if (entry?.bundle?.sha256 !== sha256) continue;
    total++;
    byBackend.set(p.id.backend, (byBackend.get(p.id.backend) ?? 0) + 1);
  }
  return { total, byBackend };
}

function bundleEntry(ctx: AgentContext, backend: string): BundleSpec {
  checkId("backend", backend);
  const entry = Object.hasOwn(ctx.config.catalog, backend) ? ctx.config.catalog[backend] : undefined;
  if (entry?.bundle === undefined) {
    const names = Object.keys(ctx.config.catalog).filter((n) => ctx.config.catalog[n]?.bundle !== undefined);
    throw invalidArgument("backend", `${JSON.stringify(backend.slice(0, 64))} is not a bundle entry of this agent's catalog (bundles: ${names.join(", ") || "none"})`);
  }
  return entry.bundle;
}

async function info(ctx: AgentContext, backend: string, spec: BundleSpec): Promise<BundleInfoInit> {
  return { backend, source: spec.source, sha256: spec.sha256, installed: (await ctx.bundles?.installed(spec.sha256)) === true, running: liveUsers(ctx, spec.sha256).byBackend.get(backend) ?? 0 };
}

/**
 * ListBundles / InstallBundle / RemoveBundle: the catalog's bundle entries
 * (backend-bundle.ts installs them). Requests name a catalog entry, never a
 * source: what a node may install stays in its own config.
 */
export function createBundleHandlers(ctx: AgentContext): Pick<Impl, "listBundles" | "installBundle" | "removeBundle"> {
  const installer = (): NonNullable<AgentContext["bundles"]> => {
    if (ctx.bundles === undefined) throw new WardenError(Code.FailedPrecondition, "this agent has no modelsPath: it installs no bundles");
    return ctx.bundles;
  };
  // As StopBackend: refused below the newest epoch seen; a newer one is kept on
  // disk before the command acts (an older leader's later command is refused,
  // across an agent restart too), and checked again in the turn that acts.
  const admitted = async (epoch: bigint): Promise<void> => {
    ctx.fence.check(epoch);
    await ctx.fence.admit(epoch);
    ctx.fence.check(epoch);
  };
  return {
    async listBundles() {
      const out: BundleInfoInit[] = [];
      for (const [backend, entry] of Object.entries(ctx.config.catalog)) if (entry.bundle !== undefined) out.push(await info(ctx, backend, entry.bundle));
      return { bundles: out };
    },
    async installBundle(req, callCtx) {
      const spec = bundleEntry(ctx, req.backend);
      const b = installer();
      await admitted(req.leaderEpoch);
      const release = b.use(spec.sha256);
      let installedHere: boolean;
      try {
        // Not installed by this call (there already, or a start's install this call waited for, which
        // the start's heartbeat reports): answered as already installed, so the coordinator audits each install once.
        ({ installedHere } = await b.ensureInstalled(spec, AbortSignal.any([callCtx.signal, ctx.closing]), () => {}, { t: "operator", backend: req.backend }));
      } finally {
        release();
      }
      return { bundle: await info(ctx, req.backend, spec), alreadyInstalled: !installedHere };
    },
    async removeBundle(req) {
      const spec = bundleEntry(ctx, req.backend);
      const b = installer();
      await admitted(req.leaderEpoch);
      const removed = await b.remove(spec.sha256, () => {
        const { total, byBackend } = liveUsers(ctx, spec.sha256);
        // A start between its install and its process entering the table holds a use (start-backend.ts): the installer refuses for it.
        return total === 0 ? undefined : `${String(total)} live process(es) of ${[...byBackend.keys()].join(", ")}`;
      });
      return { removed };
    },
  };
}
