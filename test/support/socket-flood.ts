/**
 * Hostile peers for the connection-limit tests: raw TCP sockets from a chosen
 * loopback address (127.0.0.2 is another peer than 127.0.0.1 on Linux), idle
 * ones that never send a byte, and an HTTP upload that streams its body until
 * the server answers. Reads a process's resident memory from /proc.
 */
import { connect, type Socket } from "node:net";
import { readFileSync, writeFileSync } from "node:fs";

/** A field of /proc/<pid>/status in bytes (VmRSS: resident now; VmHWM: its peak so far). */
export function procMemoryBytes(pid: number, field: "VmRSS" | "VmHWM"): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB$`, "m").exec(readFileSync(`/proc/${String(pid)}/status`, "utf8"));
  if (m === null) throw new Error(`/proc/${String(pid)}/status has no ${field}`);
  return Number(m[1]) * 1024;
}

/** Resets a process's VmHWM to its current resident size (Linux: `5` to /proc/<pid>/clear_refs), so a later VmHWM is the peak since now. */
export function resetPeakMemory(pid: number): void {
  writeFileSync(`/proc/${String(pid)}/clear_refs`, "5");
}

function hostPort(address: string): { host: string; port: number } {
  const colon = address.lastIndexOf(":");
  return { host: address.slice(0, colon), port: Number(address.slice(colon + 1)) };
}

/** Sockets that connect from `from` and then say nothing; `open()` counts those the server has not closed. */
export interface IdleFlood {
  readonly sockets: readonly Socket[];
  open(): number;
  destroy(): void;
}

/** Opens `count` idle sockets from `from` to `address`; resolves once each connected (or failed). */
export async function idleFlood(address: string, from: string, count: number): Promise<IdleFlood> {
  const { host, port } = hostPort(address);
  const sockets: Socket[] = [];
  let open = 0;
  const settled: Promise<void>[] = [];
  // In batches, so the listen backlog never overflows (a dropped SYN would retry for seconds).
  for (let i = 0; i < count; i += 64) {
    const batch: Promise<void>[] = [];
    for (let j = i; j < Math.min(count, i + 64); j++) {
      const s = connect({ host, port, localAddress: from });
      sockets.push(s);
      s.on("error", () => undefined);
      // Drop whatever the server sends (an HTTP/2 SETTINGS): a paused socket would never see the server's end.
      s.resume();
      batch.push(
        new Promise<void>((resolve) => {
          s.once("connect", () => {
            open++;
            s.once("close", () => open--);
            resolve();
          });
          s.once("close", () => {
            resolve();
          });
        }),
      );
    }
    await Promise.all(batch);
    settled.push(...batch);
  }
  await Promise.all(settled);
  return {
    sockets,
    open: () => open,
    destroy: () => {
      for (const s of sockets) s.destroy();
    },
  };
}

/** What one unauthenticated upload saw. */
export interface UploadOutcome {
  /** The status of the reply's first line, 0 when none came. */
  readonly status: number;
  /** Body bytes written before the reply came or the connection closed. */
  readonly bodyBytesSent: number;
  /** Whether the server closed the connection before the deadline. */
  readonly closedByServer: boolean;
}

/**
 * Sends `bodyBytes` of JSON (POST unless `method`) to `path` with no token, 64 KiB at a time (waiting
 * for the socket to drain), and stops writing as soon as any reply arrives
 * (unless `ignoreReply`: a hostile peer that keeps streaming); resolves when
 * the connection closes or `deadlineMs` after the start.
 */
export function unauthenticatedUpload(address: string, path: string, bodyBytes: number, deadlineMs: number, o: { readonly ignoreReply?: boolean; readonly method?: string } = {}): Promise<UploadOutcome> {
  const { host, port } = hostPort(address);
  return new Promise((resolve) => {
    // A hostile peer keeps its side open when the server half-closes.
    const s = connect({ host, port, allowHalfOpen: o.ignoreReply === true });
    let reply = "";
    let sent = 0;
    let done = false;
    const finish = (closedByServer: boolean): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      s.destroy();
      const m = /^HTTP\/1\.1 (\d{3})/.exec(reply);
      resolve({ status: m === null ? 0 : Number(m[1]), bodyBytesSent: sent, closedByServer });
    };
    const timer = setTimeout(() => {
      finish(false);
    }, deadlineMs);
    s.on("error", () => undefined);
    s.on("close", () => {
      finish(true);
    });
    s.setEncoding("latin1").on("data", (d: string) => {
      reply += d;
      if (reply.includes("\r\n\r\n") && o.ignoreReply !== true) finish(false);
    });
    const head = '{"model":"m","input":"';
    const tail = '"}';
    const chunk = Buffer.alloc(64 * 1024, "x");
    s.once("connect", () => {
      s.write(`${o.method ?? "POST"} ${path} HTTP/1.1\r\nHost: ${address}\r\nContent-Type: application/json\r\nContent-Length: ${String(bodyBytes)}\r\n\r\n${head}`);
      sent = head.length;
      const pump = (): void => {
        while (!done && s.writable) {
          const left = bodyBytes - tail.length - sent;
          if (left <= 0) {
            s.write(tail);
            sent += tail.length;
            return;
          }
          const part = left >= chunk.length ? chunk : chunk.subarray(0, left);
          sent += part.length;
          if (!s.write(part)) {
            s.once("drain", pump);
            return;
          }
        }
      };
      pump();
    });
  });
}
