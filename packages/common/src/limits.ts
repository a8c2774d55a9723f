/**
 * The documented maxima of every duration and count taken from outside: the
 * Admin API, the coordinator's and the agent's YAML. One module, so the
 * coordinator, the agent and the watchdog agree. A value above its maximum is
 * INVALID_ARGUMENT naming the field (or YAML path) and changes nothing.
 *
 * Durations are above setTimeout's 2^31-1 ms where that makes sense: the
 * clocks re-arm long timers (clock.ts), so a bound here is about what is
 * sane, not about what a timer can hold.
 */

const dayMs = 86_400_000;

/**
 * Ages and windows: idle and busy timeouts, node grace, nodeLostAfter,
 * orphan grace, recovery window, load-failure cooldowns, port quarantine,
 * memory release hold/wait. 30 days.
 */
export const maxDurationMs = 30 * dayMs;

/**
 * One operation's bound: a load timeout or deadline, a stop timeout
 * (UnloadModel stop_timeout_ms too), Free, the stop RPC, the SIGTERM grace. 1 day.
 */
export const maxOperationTimeoutMs = dayMs;

/**
 * The period of a repeating check: the watchdog tick, heartbeats, readiness,
 * health and adopted-process polls, the orphan scan, the enforcement retry
 * interval. 1 hour.
 */
export const maxIntervalMs = 3_600_000;

/** policy.limitPerNode (0 = unlimited). */
export const maxLimitPerNode = 1024;

/** policy.enforcementRetries. */
export const maxEnforcementRetries = 10_000;

/** The agent's readiness.attempts. */
export const maxReadinessAttempts = 10_000;

/** The agent's logBufferLines (lines kept per backend). */
export const maxLogBufferLines = 100_000;

/** models[].contextSize. */
export const maxContextSize = 10_000_000;

/** models[].memoryEstimate and any other size in bytes from outside: 1 PiB. */
export const maxSizeBytes = 2 ** 50;

/** Models in the config and in one UpdatePolicy patch (the watchdog's maxModels cap). */
export const maxModels = 10_000;

/** Concurrency groups of one model (the watchdog's maxGroupsPerModel cap). */
export const maxGroupsPerModel = 64;

/** Length of one group name (the watchdog's maxNameLength cap). */
export const maxGroupNameLength = 256;

/** GPU devices handed to one agent (the watchdog's maxDevicesPerNode cap). */
export const maxGpusPerNode = 64;

/** Event types in one WatchEvents filter. */
export const maxWatchEventTypes = 64;
