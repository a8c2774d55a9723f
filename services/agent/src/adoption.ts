import { privateStateDir } from "@warden/common";
import type { AgentContext } from "./agent-context.js";
import { BackendLogs } from "./backend-logs.js";
import { BackendProcess } from "./backend-process.js";
import type { Orphan } from "./orphan-scan.js";
import { isSameProcessAlive, readPidStat } from "./proc-fs.js";
import { adoptProcess } from "./process-handle.js";
import { StartLog } from "./start-log.js";

/** What `start()` found in the state dir. */
export interface AdoptionReport {
  adopted: string[];
  /** Incarnations whose process was dead (or a recycled pid): records removed. */
  forgotten: string[];
  /** Adopted mid-start (the start that owned them died with the old agent): stopped. */
  stoppedUnfinished: string[];
  orphans: Orphan[];
}

/** The start log of an adopted backend: it was ready when the old agent recorded it. */
function readyLog(p: BackendProcess): StartLog {
  const log = new StartLog();
  // No report floor: the process predates this boot, so every report of it lists it.
  log.append({ t: "spawned", address: p.id.address, pid: p.pid, gpuDevice: p.id.gpuDevice, bootEpochMs: 0, heartbeatSequence: 0n });
  log.append({ t: "loading" });
  log.append({ t: "ready", address: p.id.address, pid: p.pid, memoryBytes: 0 });
  return log;
}

/**
 * Adoption at agent start: prepares the state dir and turns each record whose
 * process still lives (same pid and start time) into a table entry polled via
 * /proc (adoptedPollMs); dead ones are forgotten, partial records of live pids
 * are kept for the port scan. The report's orphans are left for the caller's scan.
 */
export async function adoptFromStateDir(ctx: AgentContext): Promise<AdoptionReport> {
  const { config, clock, logger, procRoot, records, ports, table, starts, scan } = ctx;
  // State and logs are the owner's only: a directory or file others could read (made before Warden set modes) is tightened, and said.
  for (const t of [...(await records.init()), ...(await privateStateDir(ctx.logDir))]) logger.warn("state readable by other users: tightened", { ...t });
  const report: AdoptionReport = { adopted: [], forgotten: [], stoppedUnfinished: [], orphans: [] };
  const found = await records.list();
  scan.clearPartials();
  for (const r of found) {
    if (r.kind === "partial") {
      const st = r.partial.pid === undefined ? undefined : await readPidStat(r.partial.pid, procRoot);
      if (st === undefined || st.state === "Z") await records.removeFile(r.partial.file);
      else scan.addPartial(r.partial);
      continue;
    }
    const rec = r.record;
    const logs = new BackendLogs(ctx.logDir, rec.incarnation, config.logBufferLines);
    const portMatch = /:(\d+)$/.exec(rec.address);
    const port = Number(portMatch?.[1] ?? 0);
    if (table.has(rec.incarnation) || !(await isSameProcessAlive(rec.pid, rec.pidStartTime, procRoot))) {
      await records.remove(rec.incarnation);
      await logs.remove();
      report.forgotten.push(rec.incarnation);
      logger.info("forgot dead backend from record", { incarnation: rec.incarnation, pid: rec.pid });
      continue;
    }
    ports.claim(port);
    const handle = adoptProcess(rec.pid, rec.pidStartTime, config.adoptedPollMs, clock, procRoot);
    const proc = new BackendProcess(
      { incarnation: rec.incarnation, model: rec.model, backend: rec.backend, address: rec.address, port, pidStartTime: rec.pidStartTime, gpuDevice: rec.gpuDevice, startedAtMs: rec.startedAtMs, loadDigest: rec.loadDigest, ...(rec.artifactDigests === undefined ? {} : { artifactDigests: rec.artifactDigests }), ...(rec.bundleDigest === undefined ? {} : { bundleDigest: rec.bundleDigest }) },
      handle,
      logs,
      ctx.processDeps,
      { phase: "ready", stopRequested: rec.stopRequested },
    );
    table.set(rec.incarnation, proc);
    starts.setAdopted(rec.incarnation, { log: readyLog(proc), model: rec.model, backend: rec.backend, done: Promise.resolve() });
    report.adopted.push(rec.incarnation);
    logger.info("adopted backend", { incarnation: rec.incarnation, model: rec.model, pid: rec.pid, address: rec.address, stopRequested: rec.stopRequested !== null });
    if (rec.phase !== "ready") {
      // Its StartBackend stream died with the old agent, so no caller will ever
      // learn it became ready: stop it rather than leave a backend nobody routes to.
      report.stoppedUnfinished.push(rec.incarnation);
      void proc.stop(true);
    }
  }
  return report;
}
