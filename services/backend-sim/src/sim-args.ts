import { invalidArgument } from "@warden/common";

/** Command line of backend-sim. */
export interface SimArgs {
  /** `host:port` to bind, exactly as given (`--addr`). */
  addr: string;
  help: boolean;
}

export const simUsage = `usage: node --import tsx services/backend-sim/src/main.ts --addr HOST:PORT

A LocalAI-compatible backend.Backend server with fault knobs, for demos and tests.
It binds exactly --addr and serves Health, LoadModel, Predict, PredictStream, Free, Status.

Fault knobs, from the environment (SIM_<NAME>) or LoadModel Options ("sim.<name>:<value>"):
  load_delay_ms N      LoadModel sleeps N ms
  predict_delay_ms N   Predict sleeps N ms; PredictStream sleeps N ms before each token
  token_delay_ms N     per token on top: Predict sleeps predict_delay_ms + tokens × N; PredictStream N more per token
  parallel N           predictions served at once, the rest wait in arrival order (llama.cpp slots); 0 = unlimited (default)
  predict_tokens N     tokens per reply when the request's Tokens is 0 (default 3)
  alloc_mib N          LoadModel allocates N MiB of resident memory (released by Free)
  free MODE            Free is ok | unimplemented | hang | fail (alias: hang_on_free:true)
  ignore_sigterm BOOL  ignore SIGTERM (only SIGKILL stops the process)
  crash_after N        the Nth Predict/PredictStream makes the process exit (code crash_exit_code, default 70)
  crash_exit_code N    the exit code crash_after uses
  fail_load MSG        LoadModel answers success=false with MSG
  model_file_sha256 H  LoadModel answers success=false unless ModelFile's bytes hash to H (SHA-256 hex)
  exit_code N          exit with code N before ready (env: at start, before binding; option: inside LoadModel)
  start_delay_ms N     sleep N ms before binding (environment only)
  call_log PATH        append one line per RPC and per signal received to PATH
  mismatch_file PATH   while PATH holds a count above 0, identity-checked calls answer NOT_FOUND and decrement it
  echo BOOL            Predict/PredictStream answer a JSON echo of the request instead of words
  tts_stream BOOL      false: TTSStream answers UNIMPLEMENTED
  prefill_block_ms N   Predict/PredictStream wait N ms per prompt block not in the prefix cache before the first token
  prefix_cache_blocks N  prefix cache capacity in blocks (an LRU per process); 0 = no cache (default)
  prefix_block_chars N characters per prompt block (default 64)
  prefix_cache_output BOOL  cache the answer after its prompt too, as engines keep generated tokens (default true)

Message limit both ways: 50 MiB (LocalAI's), or BACKEND_SIM_MAX_MESSAGE_BYTES.

On exit the process writes one line to stderr: "backend-sim exiting: <reason> (code N)".
A ModelIdentity other than the loaded model is rejected with FAILED_PRECONDITION.
`;

/** Parses argv (without node and script). Throws INVALID_ARGUMENT naming the flag. */
export function parseSimArgs(argv: readonly string[]): SimArgs {
  let addr = "";
  let help = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] ?? "";
    if (a === "--help" || a === "-h") help = true;
    else if (a === "--addr") addr = argv[++i] ?? "";
    else if (a.startsWith("--addr=")) addr = a.slice("--addr=".length);
    else throw invalidArgument(a, "unknown argument");
  }
  if (!help) {
    if (addr === "") throw invalidArgument("--addr", "required (host:port)");
    if (!/^[A-Za-z0-9.\-[\]:]+:\d{1,5}$/.test(addr)) throw invalidArgument("--addr", `expected host:port, got "${addr}"`);
  }
  return { addr, help };
}
