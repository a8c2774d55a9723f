import type { Command } from "commander";
import { WardenError, invalidArgument, parseDurationMs } from "@warden/common";
import type { CliIo, Runners } from "./action-context.js";
import { exitCodeOf, exitCodes } from "./exit-codes.js";

const repeat = (v: string, prev: string[]): string[] => [...prev, v];

const synthHelp = `
Writes a workload trace (JSON lines) for a cluster that does not exist yet:
nodes node-1..N with --gib each, and each --model's calls arriving at random
(Poisson) at its rate, each holding an instance for about its duration
(exponential around it; 500ms when not given). Seeded: the same flags give the
same file. Replay it with \`warden policy simulate\`. Bounds: 64 models, 1024 nodes,
168 hours, 100 calls/s per model, 10 million calls.
Example, a day of two models on two 24 GiB GPUs:
  warden trace synth --model chat=0.05/s,4s --model embed=2/s,200ms --nodes 2 --gib 24 --hours 24 > day.jsonl
`;

const simulateHelp = `
Replays a workload trace through Warden's own decision code (loader, watchdog,
placement, replicas) under a candidate coordinator config, on simulated time,
against the trace's nodes, and prints side by side: cold starts, calls that
waited for one (p50/p99 wait), evictions by reason, failed or refused calls,
GPU-hours held by idle instances, replica-seconds, memory per node, and the top
changes in words. Without --against, the left column is what the trace itself
recorded. The config is validated as the coordinator validates it at start: one
that would not load is refused naming the field (exit 2). Calls keep their
recorded arrival and duration; loads take the model's median recorded load time
(--load-time when the trace has none). Also replayed at their recorded times:
node joins, losses (what the node ran is lost) and drains, operators' policy,
scale and limits changes, LoadModel and UnloadModel; calls of a model with
admission: go through the admission gate at their recorded class. Not modelled:
backend timing variance, network faults and failed loads or stops, other
programs' memory, how long a node takes to be declared lost, principals, per-GPU
placement (each node is one memory pool), and evictions or idle time after the
last call, where the replay ends (see
services/coordinator/docs/policy-what-if.md).
--sweep takes a policy field and values (repeatable): the grid of them over the
candidate's config, with the Pareto front of cold starts vs GPU-hours held idle.
Examples:
  warden policy simulate --trace day.jsonl --policy candidate.yaml --against warden.yaml
  warden policy simulate --trace day.jsonl --policy warden.yaml --sweep idleTimeout=1m,5m,15m --sweep limitPerNode=2,3
`;

/** `warden trace synth` and `warden policy simulate` (@warden/whatif does the work; simulate runs with the runners, whatif.ts). */
export function whatifCommands(program: Command, policy: Command, io: CliIo, runners: Runners, setCode: (code: number) => void): Command {
  const run = async (what: string, fn: () => Promise<void>): Promise<void> => {
    try {
      await fn();
      setCode(exitCodes.ok);
    } catch (err) {
      io.err.write(`warden ${what}: ${WardenError.from(err).rawMessage}\n`);
      setCode(exitCodeOf(err));
    }
  };
  const trace = program.command("trace").description("the workload trace: synthesise one (export: see `warden trace export --help`)");
  trace
    .command("synth")
    .description("write a seeded synthetic workload trace to stdout")
    .option("--model <model=rate/s[,duration]>", "a model's call rate and mean call duration, e.g. chat=0.2/s,3s (repeatable)", repeat, [])
    .option("--nodes <n>", "nodes in the cluster", "1")
    .option("--gib <n>", "GPU (or RAM) memory per node, GiB", "24")
    .option("--hours <n>", "hours of trace", "24")
    .option("--seed <n>", "random seed", "1")
    .addHelpText("after", synthHelp)
    .action(async (o: { model: string[]; nodes: string; gib: string; hours: string; seed: string }) => {
      await run("trace synth", async () => {
        const { parseSynthModel, synthTrace } = await import("@warden/whatif");
        const seed = Number(o.seed);
        if (!Number.isInteger(seed) || seed < 0) throw invalidArgument("--seed", "must be an integer >= 0");
        const lines = synthTrace({ models: o.model.map(parseSynthModel), nodes: Number(o.nodes), nodeBytes: Number(o.gib) * 1024 ** 3, hours: Number(o.hours), seed });
        await writeLines(io.out, lines);
      });
    });
  policy
    .command("simulate")
    .description("replay a workload trace under a candidate config and compare (no coordinator needed)")
    .requiredOption("--trace <file>", "the trace (warden trace export or synth)")
    .requiredOption("--policy <candidate.yaml>", "the candidate coordinator config (policy and models)")
    .option("--against <current.yaml>", "the config to compare with (default: what the trace recorded)")
    .option("--sweep <field=v1,v2,...>", "a policy field and values to sweep over the candidate (repeatable; at most 64 points)", repeat, [])
    .option("--load-time <duration>", "load time of a model the trace recorded no load for", "10s")
    .option("--seed <n>", "seed of the replay's incarnation ids and jitter", "1")
    .option("--json", "print the reports as JSON", false)
    .addHelpText("after", simulateHelp)
    .action(async (o: { trace: string; policy: string; against?: string; sweep: string[]; loadTime: string; seed: string; json: boolean }) => {
      await run("policy simulate", async () => {
        const text = await runners.simulate({ trace: o.trace, policy: o.policy, ...(o.against === undefined ? {} : { against: o.against }), sweep: o.sweep, loadTimeMs: parseDurationMs(o.loadTime, "--load-time", 3_600_000), seed: Number(o.seed), json: o.json });
        io.out.write(text);
      });
    });
  return trace;
}

/** Writes JSON lines in chunks, waiting for the stream to drain (a day of trace is tens of MB). */
async function writeLines(out: NodeJS.WritableStream, lines: Iterable<unknown>): Promise<void> {
  let chunk = "";
  for (const l of lines) {
    chunk += JSON.stringify(l) + "\n";
    if (chunk.length >= 64 * 1024) {
      if (!out.write(chunk)) await new Promise<void>((resolve) => out.once("drain", resolve));
      chunk = "";
    }
  }
  if (chunk !== "") out.write(chunk);
}
