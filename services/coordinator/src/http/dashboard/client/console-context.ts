import type { DashboardEvent, DashboardPermission, DashboardSnapshot, DashboardWhoAmI } from "../dashboard-view.js";

/** What each console page reads from the page's one connection (dashboard-client.ts owns it). */
export interface ConsoleContext {
  /** Authorization (and JSON content type) headers for a fetch. */
  headers(json?: boolean): Record<string, string>;
  who(): DashboardWhoAmI | undefined;
  snapshot(): DashboardSnapshot | undefined;
}

/** A page of the console: told of each snapshot and event the stream brings, and when it is shown. */
export interface ConsolePage {
  readonly id: string;
  readonly title: string;
  onShow?(): void;
  onSnapshot?(s: DashboardSnapshot): void;
  onEvent?(e: DashboardEvent): void;
}

/** Whether this token's role may use a control (older coordinators: canAct for all). */
export function may(ctx: ConsoleContext, what: DashboardPermission): boolean {
  const w = ctx.who();
  if (w === undefined) return false;
  return w.may === undefined ? w.canAct : w.may[what];
}

/** "CODE: message" of a failed dashboard or OpenAI-route response. */
export async function responseError(res: Response): Promise<string> {
  try {
    const b = (await res.json()) as { error?: { code?: unknown; message?: unknown } };
    const code = typeof b.error?.code === "string" ? `${b.error.code}: ` : "";
    return `${code}${typeof b.error?.message === "string" ? b.error.message : `HTTP ${String(res.status)}`}`;
  } catch {
    return `HTTP ${String(res.status)}`;
  }
}

/**
 * The last line the backend wrote to stderr before its load of `model`
 * failed (the newest backend.load-failed event's, from the coordinator's
 * event history), or "" when none is known. A few short tries: the event may
 * land just after the failed call's answer.
 */
export async function lastLoadStderr(ctx: ConsoleContext, model: string): Promise<string> {
  for (let i = 0; i < 4; i++) {
    const res = await fetch(`/api/dashboard/events?model=${encodeURIComponent(model)}&type=backend.load-failed&limit=1`, { headers: ctx.headers(), cache: "no-store" }).catch(() => undefined);
    if (res?.ok === true) {
      // The event's proto JSON: the payload sits under its oneof case's name.
      const line = ((await res.json()) as { events: { backendLoadFailed?: { lastStderrLine?: unknown } }[] }).events[0]?.backendLoadFailed?.lastStderrLine;
      if (typeof line === "string" && line !== "") return line;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  return "";
}
