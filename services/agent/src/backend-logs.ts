import { open, stat, truncate, unlink } from "node:fs/promises";
import { openSync, closeSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { LineRing } from "./line-ring.js";

/** How much of the end of a log file a tail reads (bounds what a tail costs, however large the file). */
export const tailWindowBytes = 64 * 1024;

/**
 * A backend's stdout and stderr, written by the process straight into two files
 * in `<stateDir>/logs` (opened O_APPEND). Files rather than pipes: a backend
 * must outlive an agent restart, and a pipe whose reader died turns the
 * backend's next log line into EPIPE/SIGPIPE — exactly the crash the
 * no-amnesia design is meant to survive. The agent reads only a bounded tail
 * (a ring of the last lines) and truncates a file that grows past its cap.
 */
export class BackendLogs {
  readonly stdoutPath: string;
  readonly stderrPath: string;

  constructor(dir: string, incarnation: string, private readonly maxLines: number, private readonly maxFileBytes = 8 * 1024 * 1024) {
    this.stdoutPath = join(dir, `${incarnation}.stdout.log`);
    this.stderrPath = join(dir, `${incarnation}.stderr.log`);
  }

  /** Opens both files for the child's stdio; the caller closes the fds after spawn. */
  openForChild(): { stdoutFd: number; stderrFd: number; close(): void } {
    mkdirSync(join(this.stdoutPath, ".."), { recursive: true, mode: 0o700 });
    const stdoutFd = openSync(this.stdoutPath, "a", 0o600);
    const stderrFd = openSync(this.stderrPath, "a", 0o600);
    return {
      stdoutFd,
      stderrFd,
      close() {
        closeSync(stdoutFd);
        closeSync(stderrFd);
      },
    };
  }

  private async tail(path: string, maxBytes = tailWindowBytes, maxLines = this.maxLines): Promise<LineRing> {
    const ring = new LineRing(maxLines);
    try {
      const fh = await open(path, "r");
      try {
        const size = (await fh.stat()).size;
        const len = Math.min(size, maxBytes);
        const buf = Buffer.alloc(len);
        await fh.read(buf, 0, len, size - len);
        let text = buf.toString("utf8");
        // drop a line cut in half by the window
        if (size > len) text = text.slice(text.indexOf("\n") + 1);
        ring.write(text);
        ring.end();
      } finally {
        await fh.close();
      }
    } catch {
      // no file: no output
    }
    return ring;
  }

  async lastStderrLine(): Promise<string> {
    return (await this.tail(this.stderrPath)).lastLine();
  }

  async stderrTail(): Promise<string[]> {
    return (await this.tail(this.stderrPath)).snapshot();
  }

  /** Both streams' last `maxLines` lines (GetBackendLogs), each from the file's last 64 KiB. */
  async tails(maxLines: number): Promise<{ stdout: string[]; stderr: string[] }> {
    const [out, err] = await Promise.all([this.tail(this.stdoutPath, tailWindowBytes, maxLines), this.tail(this.stderrPath, tailWindowBytes, maxLines)]);
    return { stdout: out.snapshot(), stderr: err.snapshot() };
  }

  async stdoutTail(): Promise<string[]> {
    return (await this.tail(this.stdoutPath)).snapshot();
  }

  /** Truncates a file past its cap (the writer's O_APPEND keeps working). */
  async enforceCap(): Promise<void> {
    for (const p of [this.stdoutPath, this.stderrPath]) {
      try {
        if ((await stat(p)).size > this.maxFileBytes) await truncate(p, 0);
      } catch {
        // gone
      }
    }
  }

  async remove(): Promise<void> {
    await Promise.all([unlink(this.stdoutPath).catch(() => {}), unlink(this.stderrPath).catch(() => {})]);
  }
}
