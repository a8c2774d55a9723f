import type { FastifyReply } from "fastify";

/**
 * A server-sent-events response on a fastify reply: headers once, then
 * `data:` events, each write waiting for the socket to drain (a slow reader
 * holds the producer back instead of growing a buffer). The reply is taken
 * over from fastify (hijack), so errors after `start` are this writer's to
 * report, as an event. A gone client makes every write a no-op that resolves.
 */
export class SseWriter {
  private started = false;
  private closed = false;

  constructor(private readonly reply: FastifyReply) {
    reply.raw.once("close", () => {
      this.closed = true;
    });
  }

  get isStarted(): boolean {
    return this.started;
  }

  /** Sends the 200 and the event-stream headers. */
  start(): void {
    if (this.started) return;
    this.started = true;
    this.reply.hijack();
    this.reply.raw.writeHead(200, {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache",
      connection: "keep-alive",
      // Proxies (nginx) must pass each event on at once.
      "x-accel-buffering": "no",
    });
  }

  /** One event: `data:` with `text` (one line: JSON has no raw newlines), and an optional `event:` name. */
  send(text: string, event?: string): Promise<void> {
    this.start();
    if (this.closed) return Promise.resolve();
    const ok = this.reply.raw.write(`${event === undefined ? "" : `event: ${event}\n`}data: ${text}\n\n`);
    if (ok) return Promise.resolve();
    return new Promise((resolve) => {
      const done = (): void => {
        this.reply.raw.off("drain", done);
        this.reply.raw.off("close", done);
        resolve();
      };
      this.reply.raw.on("drain", done);
      this.reply.raw.on("close", done);
    });
  }

  sendJson(value: unknown): Promise<void> {
    return this.send(JSON.stringify(value));
  }

  /** Ends the response (after a final event such as `[DONE]`). */
  end(): void {
    this.start();
    if (!this.closed) this.reply.raw.end();
  }
}
