import { pino, type Logger as PinoLogger } from "pino";
import { redactFields, redactText } from "./redact.js";

export type LogMeta = Readonly<Record<string, unknown>>;

/**
 * The narrow logger the rest of Warden depends on. Services pass a pino child
 * per component; tests pass `nullLogger` or a recording logger. Errors go under
 * an `err` key so pino serialises them.
 */
export interface Logger {
  debug(msg: string, meta?: LogMeta): void;
  info(msg: string, meta?: LogMeta): void;
  warn(msg: string, meta?: LogMeta): void;
  error(msg: string, meta?: LogMeta): void;
  child(bindings: LogMeta): Logger;
}

export const nullLogger: Logger = {
  debug() {},
  info() {},
  warn() {},
  error() {},
  child() {
    return nullLogger;
  },
};

/**
 * `bound` is every binding so far: a child is made from the root with all of
 * them merged, never a child of a child, because pino writes a repeated key
 * twice on one line (`"component":"embedded-agent","component":"agent"`),
 * which strict JSON log pipelines reject. Nested components join with "/".
 */
function wrap(p: PinoLogger, root: PinoLogger = p, bound: LogMeta = {}): Logger {
  return {
    debug: (msg, meta) => {
      p.debug(meta ?? {}, redactText(msg));
    },
    info: (msg, meta) => {
      p.info(meta ?? {}, redactText(msg));
    },
    warn: (msg, meta) => {
      p.warn(meta ?? {}, redactText(msg));
    },
    error: (msg, meta) => {
      p.error(meta ?? {}, redactText(msg));
    },
    child: (bindings) => {
      const merged: Record<string, unknown> = { ...bound, ...bindings };
      if (typeof bound.component === "string" && typeof bindings.component === "string") merged.component = `${bound.component}/${bindings.component}`;
      // Bindings are serialized once at child creation, past formatters.log: redacted here.
      return wrap(root.child(redactFields(merged)), root, merged);
    },
  };
}

export interface CreateLoggerOptions {
  name: string;
  /** @default "info" */
  level?: string;
  /** Destination stream; stdout by default. */
  destination?: NodeJS.WritableStream;
}

/**
 * A pino JSON logger behind the Logger interface. BigInts are logged as
 * strings (pino would lose precision). Secrets never reach the line
 * (redact.ts): token, password, key, credential and authorization fields at
 * any depth, and bearer or Warden tokens inside any string, message included.
 */
export function createLogger(options: CreateLoggerOptions): Logger {
  const p = pino(
    {
      name: options.name,
      level: options.level ?? "info",
      formatters: {
        log(obj) {
          for (const [k, v] of Object.entries(obj)) if (typeof v === "bigint") obj[k] = v.toString();
          return redactFields(obj);
        },
        bindings(b) {
          return redactFields(b);
        },
      },
    },
    options.destination ?? process.stdout,
  );
  return wrap(p);
}
