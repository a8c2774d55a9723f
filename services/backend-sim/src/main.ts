import { appendFileSync, writeSync } from "node:fs";
import { sleep, systemClock, WardenError } from "@warden/common";
import { GrpcServer, ReloadableServerCredentials, guardService, readTlsMaterial, sharedTokenCheck } from "@warden/grpc";
import { Backend } from "@warden/proto";
import { createBackendSim } from "./backend-sim-service.js";
import { parseSimArgs, simUsage } from "./sim-args.js";
import { parseSimEnv } from "./sim-knobs.js";
import { simMaxMessageBytes } from "./message-limit.js";

// Entry point: `node --import tsx services/backend-sim/src/main.ts --addr 127.0.0.1:PORT`.
// Every exit path writes exactly one stderr line first, so an agent's
// "last stderr line" always says why the process ended.

/** Where signals are logged: the call_log knob as the simulator currently has it. */
let callLog = (): string => "";

function exitWith(code: number, reason: string): never {
  try {
    writeSync(2, `backend-sim exiting: ${reason} (code ${String(code)})\n`);
  } catch {
    // stderr closed: nothing left to tell
  }
  process.exit(code);
}

function logSignal(name: string): void {
  const path = callLog();
  if (path === "") return;
  try {
    appendFileSync(path, `${name}\n`);
  } catch {
    // test aid only
  }
}

async function main(): Promise<void> {
  let args;
  let knobs;
  let maxMessageBytes;
  try {
    args = parseSimArgs(process.argv.slice(2));
    knobs = parseSimEnv(process.env);
    maxMessageBytes = simMaxMessageBytes(process.env);
  } catch (err) {
    writeSync(2, `${WardenError.from(err).rawMessage}\n\n${simUsage}`);
    exitWith(2, "bad arguments");
  }
  if (args.help) {
    process.stdout.write(simUsage);
    return;
  }
  if (knobs.exitCode >= 0) exitWith(knobs.exitCode, "exit_code knob before ready");
  if (knobs.startDelayMs > 0) await sleep(systemClock, knobs.startDelayMs);

  let ignoreSigterm = knobs.ignoreSigterm;
  // TLS from BACKEND_SIM_TLS_CERT / BACKEND_SIM_TLS_KEY (a catalog entry's env): a
  // backend serving TLS, for the coordinator's backendTls. Plaintext otherwise;
  // a simulator, so any address is allowed (the agent picks backendHost).
  const certFile = process.env.BACKEND_SIM_TLS_CERT;
  const keyFile = process.env.BACKEND_SIM_TLS_KEY;
  let credentials;
  try {
    credentials = certFile === undefined || keyFile === undefined ? undefined : new ReloadableServerCredentials(readTlsMaterial({ certFile, keyFile }, "BACKEND_SIM_TLS"));
  } catch (err) {
    exitWith(2, WardenError.from(err).rawMessage);
  }
  const server = new GrpcServer({ insecure: true, maxReceiveMessageBytes: maxMessageBytes, maxSendMessageBytes: maxMessageBytes, ...(credentials === undefined ? {} : { credentials }) });
  const sim = createBackendSim({
    knobs,
    hooks: {
      exit: exitWith,
      setIgnoreSigterm(ignore) {
        ignoreSigterm = ignore;
      },
    },
  });
  // Like LocalAI's backends (pkg/grpc/server.go): with LOCALAI_GRPC_AUTH_TOKEN
  // set, every Backend call, Health included, needs `authorization: Bearer <token>`.
  const authToken = process.env.LOCALAI_GRPC_AUTH_TOKEN ?? "";
  server.add(Backend, authToken === "" ? sim.impl : guardService(Backend, sim.impl, sharedTokenCheck(authToken)));
  if (authToken !== "") process.stdout.write(`${JSON.stringify({ msg: "gRPC auth enabled via LOCALAI_GRPC_AUTH_TOKEN" })}\n`);
  callLog = () => sim.state().knobs.callLog;

  process.on("SIGTERM", () => {
    logSignal("SIGTERM");
    if (ignoreSigterm) {
      writeSync(2, "backend-sim: ignoring SIGTERM (knob ignore_sigterm)\n");
      return;
    }
    // A short drain: the agent's grace decides how long we may take, not us.
    void server.shutdown(500).finally(() => { exitWith(0, "SIGTERM"); });
  });
  process.on("SIGINT", () => {
    logSignal("SIGINT");
    exitWith(130, "SIGINT");
  });

  try {
    const { address } = await server.listen(args.addr);
    process.stdout.write(`${JSON.stringify({ msg: "backend-sim listening", address, pid: process.pid })}\n`);
  } catch (err) {
    exitWith(3, `cannot bind ${args.addr}: ${WardenError.from(err).rawMessage}`);
  }
}

void main();
