/**
 * Reads the README's Walkthrough into steps a test can replay, and blanks what
 * differs between runs so outputs compare line for line.
 */

export type WalkStep =
  | { kind: "command"; command: string; expected: string[]; background: boolean; afterSleep: boolean }
  | { kind: "events"; expected: string[] };

/** The lines of `## title` up to the next `## ` heading. */
function section(markdown: string, title: string): string[] {
  const lines = markdown.split("\n");
  const start = lines.indexOf(`## ${title}`);
  if (start < 0) throw new Error(`README has no "## ${title}" section`);
  let end = start + 1;
  while (end < lines.length && !(lines[end] ?? "").startsWith("## ")) end++;
  return lines.slice(start + 1, end);
}

/** The fenced code blocks of `lines`, each as its lines. */
function codeBlocks(lines: readonly string[]): string[][] {
  const blocks: string[][] = [];
  let open: string[] | undefined;
  for (const l of lines) {
    if (l.startsWith("```")) {
      if (open === undefined) open = [];
      else {
        blocks.push(open);
        open = undefined;
      }
    } else open?.push(l);
  }
  return blocks;
}

/** Walkthrough steps: `$ cmd` lines with the output below them; a block without a prompt is `warden events` output. */
export function parseWalkthrough(markdown: string): WalkStep[] {
  const steps: WalkStep[] = [];
  for (const block of codeBlocks(section(markdown, "Walkthrough"))) {
    if (!block.some((l) => l.startsWith("$ "))) {
      steps.push({ kind: "events", expected: block });
      continue;
    }
    let current: Extract<WalkStep, { kind: "command" }> | undefined;
    for (let i = 0; i < block.length; i++) {
      const line = block[i] ?? "";
      if (!line.startsWith("$ ")) {
        current?.expected.push(line);
        continue;
      }
      let command = line.slice(2);
      // A trailing backslash continues the command on the next line (the curl examples).
      while (command.endsWith("\\") && i + 1 < block.length) command = `${command.slice(0, -1)} ${(block[++i] ?? "").trim()}`;
      command = stripComment(command).trim();
      const background = command.endsWith("&");
      if (background) command = command.slice(0, -1).trim();
      const sleep = /^sleep \d+;\s*/.exec(command);
      if (sleep !== null) command = command.slice(sleep[0].length);
      current = { kind: "command", command, expected: [], background, afterSleep: sleep !== null };
      steps.push(current);
    }
  }
  return steps;
}

/** `cmd   # note` → `cmd` (a `#` inside quotes is kept). */
function stripComment(command: string): string {
  let quote = "";
  for (let i = 0; i < command.length; i++) {
    const c = command[i];
    if (quote !== "") {
      if (c === quote) quote = "";
    } else if (c === "'" || c === '"') quote = c;
    else if (c === "#" && (i === 0 || command[i - 1] === " ")) return command.slice(0, i);
  }
  return command;
}

/** Splits a command line as a POSIX shell would for these examples (quotes, no expansion). */
export function shellWords(command: string): string[] {
  const words: string[] = [];
  let word = "";
  let inWord = false;
  let quote = "";
  for (const c of command) {
    if (quote !== "") {
      if (c === quote) quote = "";
      else word += c;
    } else if (c === "'" || c === '"') {
      quote = c;
      inWord = true;
    } else if (c === " ") {
      if (inWord) words.push(word);
      word = "";
      inWord = false;
    } else {
      word += c;
      inWord = true;
    }
  }
  if (inWord) words.push(word);
  return words;
}

const ulid = /\b[0-9A-HJKMNP-TV-Z]{26}\b/g;

/**
 * Output lines with what changes between runs blanked: incarnations, loopback
 * ports, clock times, "… ago", load durations, request ids, `created`. Table
 * borders and blank lines are dropped and cells compared trimmed (column widths
 * follow the values), runs of spaces collapsed (the events' alignment), and the
 * CLI's progress line ("waiting for m … 1s", "loading m (starting) on local … 2s":
 * rewritten in place on a terminal, and how far it gets depends on timing) left out.
 */
export function normalizeOutput(lines: readonly string[]): string[] {
  const out: string[] = [];
  for (const raw of lines) {
    let l = raw.trimEnd();
    if (l.trim() === "") continue;
    if (/^[┌├└][─┬┼┴┐┤┘]+$/.test(l)) continue;
    if (/^waiting for \S+ … \d+s$/.test(l) || /^loading \S+(?: \([^)]*\))?(?: on \S+)? … \d+s$/.test(l)) continue;
    if (l.startsWith("│")) l = l.split("│").slice(1, -1).map((c) => c.trim()).join(" | ");
    l = l
      .replace(ulid, "<ULID>")
      .replace(/127\.0\.0\.1:\d+/g, "127.0.0.1:<PORT>")
      .replace(/\b\d+(?:\.\d+)?(?:ms|s|m|h) ago\b/g, "<AGO>")
      .replace(/^\d{2}:\d{2}:\d{2}\.\d{3}\b/, "<TIME>")
      .replace(/"loadDurationMs":"\d+"/g, '"loadDurationMs":"<N>"')
      .replace(/"stopDurationMs":"\d+"/g, '"stopDurationMs":"<N>"')
      .replace(/"openRequestIds":\["\d+"\]/g, '"openRequestIds":["<N>"]')
      .replace(/"created":\d+/g, '"created":<N>')
      .replace(/ {2,}/g, " ");
    out.push(l);
  }
  return out;
}
