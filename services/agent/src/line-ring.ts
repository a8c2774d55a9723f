/**
 * A bounded buffer of the last lines written to a stream (a backend's stdout or
 * stderr). Memory is O(maxLines × maxLineBytes) however much the process writes.
 */
export class LineRing {
  private readonly lines: string[] = [];
  private partial = "";

  constructor(
    private readonly maxLines: number,
    private readonly maxLineChars = 4096,
  ) {}

  /** Appends a chunk; complete lines enter the ring, a trailing partial line waits. */
  write(chunk: string): void {
    const parts = (this.partial + chunk).split("\n");
    this.partial = (parts.pop() ?? "").slice(-this.maxLineChars);
    for (const p of parts) this.push(p);
  }

  /** Flushes a trailing partial line (at stream end). */
  end(): void {
    if (this.partial !== "") this.push(this.partial);
    this.partial = "";
  }

  private push(line: string): void {
    const l = line.replace(/\r$/, "").slice(0, this.maxLineChars);
    this.lines.push(l);
    if (this.lines.length > this.maxLines) this.lines.shift();
  }

  /** The last non-empty line, including a pending partial one; "" when none. */
  lastLine(): string {
    if (this.partial.trim() !== "") return this.partial;
    for (let i = this.lines.length - 1; i >= 0; i--) {
      const l = this.lines[i] ?? "";
      if (l.trim() !== "") return l;
    }
    return "";
  }

  snapshot(): string[] {
    return this.partial === "" ? [...this.lines] : [...this.lines, this.partial];
  }
}
