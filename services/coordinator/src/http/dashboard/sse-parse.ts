/**
 * Splits server-sent event text into frames. The browser client reads the
 * stream with fetch (EventSource cannot send an Authorization header), so it
 * parses the frames itself. Pure: text in, frames and the unfinished tail out.
 */

export interface SseMessage {
  readonly event: string;
  readonly data: string;
}

/** Longest unfinished frame kept between chunks; a stream past it is broken (the server's frames are far smaller). */
export const maxSseFrameChars = 8 * 1024 * 1024;

export function parseSse(buffer: string): { readonly messages: SseMessage[]; readonly rest: string } {
  const messages: SseMessage[] = [];
  let start = 0;
  for (;;) {
    const end = buffer.indexOf("\n\n", start);
    if (end < 0) break;
    const block = buffer.slice(start, end);
    start = end + 2;
    let event = "message";
    const data: string[] = [];
    for (const line of block.split("\n")) {
      if (line === "" || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "event") event = value;
      else if (field === "data") data.push(value);
    }
    if (data.length > 0) messages.push({ event, data: data.join("\n") });
  }
  const rest = buffer.slice(start);
  if (rest.length > maxSseFrameChars) throw new Error(`event stream frame longer than ${String(maxSseFrameChars)} characters`);
  return { messages, rest };
}
