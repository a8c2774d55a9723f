import { createHash } from "node:crypto";
import { resolve } from "node:path";

// Every backend the agent spawns carries a mark in its environment, read back
// from /proc/<pid>/environ: only a process with this agent's mark is ever an
// orphan (signalled after the grace). Anything else listening in the port range
// is foreign — another program, another Warden — and is never signalled.

/** The environment variables of the mark, put first in the child's environment. */
export const markVars = {
  nodeId: "WARDEN_NODE_ID",
  incarnation: "WARDEN_INCARNATION",
  /**
   * The model the process was started for: a backend whose agent was killed
   * between spawn and its record is reported as an orphan of this model, so it
   * counts for its model's exclusive groups until stopped (without it, the
   * coordinator started the other member of its group beside it).
   */
  model: "WARDEN_MODEL",
  /** Tells apart two agents that share a node id (e.g. `npm test` beside `npm start`). */
  token: "WARDEN_AGENT_TOKEN",
} as const;

/** Who this agent is, as written into the mark. */
export interface AgentMark {
  readonly nodeId: string;
  /** {@link agentToken} of the agent's state dir. */
  readonly token: string;
}

/**
 * The agent's token: 16 hex digits of the SHA-256 of its absolute state dir.
 * Derived, not stored, so a restarted agent (same state dir) recognises the
 * children of the one before it, and two agents on one host (different state
 * dirs) never take each other's children for their own.
 */
export function agentToken(stateDir: string): string {
  return createHash("sha256").update(resolve(stateDir)).digest("hex").slice(0, 16);
}

export function agentMarkOf(nodeId: string, stateDir: string): AgentMark {
  return { nodeId, token: agentToken(stateDir) };
}

/** The environment entries that mark a child of `mark` for `incarnation`. */
export function markEnv(mark: AgentMark, incarnation: string, model = ""): Record<string, string> {
  return { [markVars.nodeId]: mark.nodeId, [markVars.incarnation]: incarnation, [markVars.token]: mark.token, ...(model === "" ? {} : { [markVars.model]: model }) };
}

/** What a process's environment says about who started it. */
export type MarkVerdict =
  | { readonly t: "ours"; readonly incarnation: string; readonly model?: string }
  | { readonly t: "foreign"; readonly detail: string };

/** The value of `name` in a NUL-separated environ block, or undefined. */
function envValue(environ: string, name: string): string | undefined {
  const prefix = `${name}=`;
  for (const kv of environ.split("\0")) if (kv.startsWith(prefix)) return kv.slice(prefix.length);
  return undefined;
}

/**
 * Classifies a process by its environ (the content of /proc/<pid>/environ, or
 * undefined when it could not be read — another user's process: EACCES). Only
 * a complete mark of this node *and* this agent is ours; everything else,
 * unreadable included, is foreign.
 */
export function classifyEnviron(environ: string | undefined, mark: AgentMark): MarkVerdict {
  if (environ === undefined) return { t: "foreign", detail: "environment unreadable (not this agent's to inspect)" };
  const nodeId = envValue(environ, markVars.nodeId);
  if (nodeId === undefined) return { t: "foreign", detail: "no Warden mark" };
  if (nodeId !== mark.nodeId) return { t: "foreign", detail: `marked for node ${nodeId.slice(0, 128)}` };
  if (envValue(environ, markVars.token) !== mark.token) return { t: "foreign", detail: `marked for node ${nodeId.slice(0, 128)} by another agent (another state dir)` };
  const incarnation = envValue(environ, markVars.incarnation) ?? "";
  const model = envValue(environ, markVars.model) ?? "";
  return { t: "ours", incarnation: incarnation.slice(0, 128), ...(model === "" ? {} : { model: model.slice(0, 256) }) };
}
