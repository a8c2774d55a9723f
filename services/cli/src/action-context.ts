import type { SimulateOptions } from "./whatif.js";

/** Where the CLI writes; injectable so tests can capture it. */
export interface CliIo {
  readonly out: NodeJS.WritableStream;
  readonly err: NodeJS.WritableStream;
  readonly env: Readonly<Record<string, string | undefined>>;
  /** Whether stderr is a terminal (progress lines are redrawn in place). */
  readonly interactive: boolean;
}

/** The options every admin command takes. */
export interface GlobalOpts {
  addr: string;
  json: boolean;
  timeout: string;
  /** TLS to Warden (see clientTls in admin-actions.ts); plaintext when none is set. */
  tlsCa?: string;
  tlsCert?: string;
  tlsKey?: string;
  tlsServerName?: string;
  /** `--token-file <file>` (else WARDEN_TOKEN). */
  tokenFile?: string;
  /** The bearer token resolved from tokenFile / WARDEN_TOKEN before the action runs (cli-token.ts). */
  authToken?: string;
}

/** What an admin action needs from the command layer. */
export interface ActionContext {
  readonly io: CliIo;
  print(s: string): void;
  /** A progress line for work that takes more than a second (a label read at each redraw; `why()` appended when not empty); call the result when done. */
  progress(label: string | (() => string), why?: () => string): () => void;
  /** The call's deadline in ms from --timeout. */
  deadline(g: GlobalOpts): number;
}

/** The long-running commands (coordinator, agent, NATS reader), loaded only when run. */
export interface Runners {
  up(o: Record<string, unknown>): Promise<number>;
  coordinator(o: Record<string, unknown>): Promise<number>;
  agent(args: string[]): Promise<number>;
  natsEvents(o: Record<string, unknown>, g: GlobalOpts): Promise<number>;
  /** `warden policy simulate` (whatif.ts): it validates configs with the coordinator's own parser, so it loads with the runners. */
  simulate(o: SimulateOptions): Promise<string>;
}
