import { Writable } from "node:stream";

const levels: Readonly<Record<number, string>> = { 10: "TRACE", 20: "DEBUG", 30: "INFO ", 40: "WARN ", 50: "ERROR", 60: "FATAL" };
const skip = new Set(["level", "time", "pid", "hostname", "name", "msg", "component"]);

function value(v: unknown): string {
  if (typeof v === "string") return /\s/.test(v) ? JSON.stringify(v) : v;
  return JSON.stringify(v);
}

/**
 * `--log-pretty`: turns pino's JSON lines into one readable line each
 * (`14:02:11 INFO  loader  backend loaded model=chat-small`). Lines that are
 * not JSON pass through unchanged.
 */
export function prettyLogStream(out: NodeJS.WritableStream = process.stderr): Writable {
  let buf = "";
  return new Writable({
    write(chunk: Buffer, _enc, cb) {
      buf += chunk.toString("utf8");
      let nl = buf.indexOf("\n");
      while (nl >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        nl = buf.indexOf("\n");
        try {
          const o = JSON.parse(line) as Record<string, unknown>;
          const t = new Date(typeof o.time === "number" ? o.time : Date.now()).toISOString().slice(11, 19);
          const lvl = levels[typeof o.level === "number" ? o.level : 30] ?? "INFO ";
          const comp = typeof o.component === "string" ? o.component : typeof o.name === "string" ? o.name : "";
          const rest = Object.entries(o)
            .filter(([k]) => !skip.has(k))
            .map(([k, v]) => `${k}=${value(v)}`)
            .join(" ");
          out.write(`${t} ${lvl} ${comp.padEnd(16)} ${typeof o.msg === "string" ? o.msg : ""}${rest === "" ? "" : ` ${rest}`}\n`);
        } catch {
          out.write(`${line}\n`);
        }
      }
      cb();
    },
  });
}
