import { invalidArgument, parseDurationMs, permissionDenied } from "@warden/common";

/**
 * A call's priority class, highest first. Under contention a model's queue
 * serves critical before standard before sheddable, and sheds sheddable
 * calls first (the Gateway API Inference Extension's criticality).
 */
export type PriorityClass = "critical" | "standard" | "sheddable";

/** Highest first: the order the queue serves them in. */
export const priorityClasses: readonly PriorityClass[] = ["critical", "standard", "sheddable"];

export function isPriorityClass(s: string): s is PriorityClass {
  return (priorityClasses as readonly string[]).includes(s);
}

/** Whether `a` ranks above `b`. */
export function ranksAbove(a: PriorityClass, b: PriorityClass): boolean {
  return priorityClasses.indexOf(a) < priorityClasses.indexOf(b);
}

/** One model's admission bounds at one moment (capacity follows its ready replicas). */
export interface AdmissionLimits {
  /** Calls in flight at once. */
  readonly capacity: number;
  /** Waiting calls at which sheddable calls are refused at once. */
  readonly shedAtQueued: number;
  /** Waiting calls at most. */
  readonly maxQueued: number;
  /** Waiting calls of one principal at most. */
  readonly maxQueuedPerPrincipal: number;
}

/** A model's `admission:` settings, validated. */
export interface AdmissionSettings {
  /** Calls in flight per ready (or loading) replica; at least the model's `targetInFlight` so scale-up still sees demand. 1–10 000. */
  readonly maxInFlightPerReplica: number;
  /** Waiting calls at which sheddable calls are refused. 0–100 000. @default maxInFlightPerReplica */
  readonly shedAtQueued: number;
  /** Waiting calls at most. 1–100 000. @default 512 */
  readonly maxQueued: number;
  /** Waiting calls of one principal at most. 1–100 000. @default maxQueued / 4, at least 1 */
  readonly maxQueuedPerPrincipal: number;
  /** The Retry-After a refused call is told (`retryAfter`, a duration up to 10 min). @default 1s */
  readonly retryAfterMs: number;
}

export const admissionBounds = Object.freeze({ maxInFlightPerReplica: 10_000, maxQueued: 100_000, retryAfterMs: 600_000 });

function int(field: string, v: unknown, min: number, max: number): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < min || v > max) throw invalidArgument(field, `must be an integer from ${String(min)} to ${String(max)}, got ${JSON.stringify(v)}`);
  return v;
}

/**
 * Validates a model's `admission:` block whole (INVALID_ARGUMENT naming the
 * field). `targetInFlight`: the model's replica setting the per-replica
 * bound may not be under (else no replica would ever reach the scale-up
 * threshold and the queue would grow instead).
 */
export function admissionSettings(field: string, raw: unknown, targetInFlight: number): AdmissionSettings {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) throw invalidArgument(field, "must be a mapping");
  const o = raw as Record<string, unknown>;
  const known = ["maxInFlightPerReplica", "shedAtQueued", "maxQueued", "maxQueuedPerPrincipal", "retryAfter"];
  for (const k of Object.keys(o)) if (!known.includes(k)) throw invalidArgument(`${field}.${k}`, `unknown field (expected one of ${known.join(", ")})`);
  const perReplica = int(`${field}.maxInFlightPerReplica`, o.maxInFlightPerReplica, 1, admissionBounds.maxInFlightPerReplica);
  if (perReplica < targetInFlight) throw invalidArgument(`${field}.maxInFlightPerReplica`, `must be at least the model's replicas.targetInFlight (${String(targetInFlight)}), or no replica would reach the scale-up threshold`);
  const maxQueued = o.maxQueued === undefined ? 512 : int(`${field}.maxQueued`, o.maxQueued, 1, admissionBounds.maxQueued);
  const shedAtQueued = o.shedAtQueued === undefined ? Math.min(perReplica, maxQueued) : int(`${field}.shedAtQueued`, o.shedAtQueued, 0, maxQueued);
  const maxQueuedPerPrincipal = o.maxQueuedPerPrincipal === undefined ? Math.max(1, Math.floor(maxQueued / 4)) : int(`${field}.maxQueuedPerPrincipal`, o.maxQueuedPerPrincipal, 1, maxQueued);
  const ra = o.retryAfter;
  if (ra !== undefined && typeof ra !== "string" && typeof ra !== "number") throw invalidArgument(`${field}.retryAfter`, `must be a duration like "2s", got ${JSON.stringify(ra)}`);
  const retryAfterMs = ra === undefined ? 1000 : parseDurationMs(ra, `${field}.retryAfter`, admissionBounds.retryAfterMs);
  return { maxInFlightPerReplica: perReplica, shedAtQueued, maxQueued, maxQueuedPerPrincipal, retryAfterMs };
}

/** The limits now, for `replicas` ready or loading replicas (at least one: the first call's load must get through). */
export function admissionLimits(s: AdmissionSettings, replicas: number): AdmissionLimits {
  return { capacity: s.maxInFlightPerReplica * Math.max(1, replicas), shedAtQueued: s.shedAtQueued, maxQueued: s.maxQueued, maxQueuedPerPrincipal: s.maxQueuedPerPrincipal };
}

/**
 * The class a call runs at: the one it asked for (a header or metadata),
 * at most its token's class; none asked, its token's class. `asked` above
 * the token's class is refused (PERMISSION_DENIED naming `field`).
 */
export function callClass(tokenClass: PriorityClass, asked: string | undefined, field: string): PriorityClass {
  if (asked === undefined || asked === "") return tokenClass;
  if (!isPriorityClass(asked)) throw invalidArgument(field, `must be one of ${priorityClasses.join(", ")}, got ${JSON.stringify(asked.slice(0, 32))}`);
  if (ranksAbove(asked, tokenClass)) throw permissionDenied(field, `this token may ask for ${tokenClass} or lower, not ${asked}`);
  return asked;
}
