/** `warden backends ls | install | remove`. Loaded on demand by program.ts, like admin-actions.ts. */
import { toJson } from "@bufbuild/protobuf";
import { AdminService, InstallBackendBundleResponseSchema, ListBackendBundlesResponseSchema, RemoveBackendBundleResponseSchema, type BackendBundleResult } from "@warden/proto";
import { bearerMetadata } from "@warden/grpc";
import { invalidArgument } from "@warden/common";
import { cliClient } from "./cli-client.js";
import { cliTransport } from "./cli-tls.js";
import { exitCodes } from "./exit-codes.js";
import { table } from "./render.js";
import type { ActionContext, GlobalOpts } from "./action-context.js";

export interface BundleTargetOpts {
  readonly node?: string;
  readonly all: boolean;
}

type Admin = ReturnType<typeof cliClient<typeof AdminService>>;

async function withAdmin<T>(g: GlobalOpts, f: (admin: Admin) => Promise<T>): Promise<T> {
  const admin = cliClient(AdminService, g, { ...cliTransport(g), ...(g.authToken === undefined ? {} : { headers: bearerMetadata(g.authToken) }) });
  try {
    return await f(admin);
  } finally {
    admin.close();
  }
}

const short = (sha256: string): string => (sha256 === "" ? "-" : sha256.slice(0, 12));

/**
 * Every node's catalog bundles (ListBackendBundles). A node that could not
 * answer is listed with why, and makes the exit code 8.
 */
export async function backendsLs(c: ActionContext, g: GlobalOpts, o: { readonly node?: string }): Promise<number | undefined> {
  const r = await withAdmin(g, (admin) => admin.listBackendBundles({ nodeId: o.node ?? "" }, { timeoutMs: c.deadline(g) }));
  const failed = r.nodes.filter((n) => n.error !== "").length;
  if (g.json) c.print(JSON.stringify(toJson(ListBackendBundlesResponseSchema, r, { alwaysEmitImplicit: true }), null, 2));
  else {
    const rows: string[][] = [];
    for (const n of r.nodes) {
      if (n.error !== "") rows.push([n.nodeId, "-", "-", "-", "-", `no answer: ${n.error}`]);
      for (const b of n.bundles) rows.push([n.nodeId, b.backend, b.installed ? "yes" : "no", String(b.running), short(b.sha256), b.source]);
      if (n.error === "" && n.bundles.length === 0) rows.push([n.nodeId, "-", "-", "-", "-", "(no bundle entries in its catalog)"]);
    }
    c.print(rows.length === 0 ? "no nodes registered" : table(["NODE", "BACKEND", "INSTALLED", "RUNNING", "SHA256", "SOURCE"], rows));
  }
  return failed > 0 ? exitCodes.incomplete : undefined;
}

function targetOf(backend: string, o: BundleTargetOpts): { backend: string; nodeId: string; allNodes: boolean } {
  if ((o.node === undefined) === !o.all) throw invalidArgument("--node", "give exactly one of --node <id> or --all");
  return { backend, nodeId: o.node ?? "", allNodes: o.all };
}

function resultLines(results: readonly BackendBundleResult[], done: (r: BackendBundleResult) => string): string {
  return results.map((r) => `${r.nodeId}: ${r.error !== "" ? `failed: ${r.error}` : done(r)}`).join("\n");
}

/** InstallBackendBundle on one node or all nodes whose catalog names it; exit 8 when some node did not install it. */
export async function backendsInstall(c: ActionContext, g: GlobalOpts, backend: string, o: BundleTargetOpts): Promise<number | undefined> {
  const req = targetOf(backend, o);
  const stop = c.progress(`installing ${backend}`);
  const r = await withAdmin(g, (admin) => admin.installBackendBundle(req, { timeoutMs: c.deadline(g) })).finally(stop);
  if (g.json) c.print(JSON.stringify(toJson(InstallBackendBundleResponseSchema, r, { alwaysEmitImplicit: true }), null, 2));
  else c.print(resultLines(r.results, (x) => `${backend} ${x.alreadyInstalled ? "was already installed" : "installed"} (sha256 ${short(x.bundle?.sha256 ?? "")})`));
  return r.results.some((x) => x.error !== "") ? exitCodes.incomplete : undefined;
}

/** RemoveBackendBundle; refused whole (exit 7) while an instance uses the backend on a targeted node. */
export async function backendsRemove(c: ActionContext, g: GlobalOpts, backend: string, o: BundleTargetOpts): Promise<number | undefined> {
  const req = targetOf(backend, o);
  const r = await withAdmin(g, (admin) => admin.removeBackendBundle(req, { timeoutMs: c.deadline(g) }));
  if (g.json) c.print(JSON.stringify(toJson(RemoveBackendBundleResponseSchema, r, { alwaysEmitImplicit: true }), null, 2));
  else c.print(resultLines(r.results, (x) => (x.removed ? `${backend} removed` : `${backend} was not installed; nothing changed`)));
  return r.results.some((x) => x.error !== "") ? exitCodes.incomplete : undefined;
}
