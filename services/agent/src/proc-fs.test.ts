import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { isSameProcessAlive, parseMeminfo, parsePidStat, parseProcNetTcp, readPidStat, readRssBytes } from "./proc-fs.js";

describe("/proc readers", () => {
  it("reads field 22 (start time) even when the command name holds spaces and parentheses", () => {
    const fields = Array.from({ length: 50 }, (_, i) => String(i + 3));
    fields[0] = "S";
    fields[2] = "4242"; // field 5: pgrp
    fields[19] = "987654"; // field 22: starttime
    const st = parsePidStat(`4242 (evil) (name) ${fields.join(" ")}`);
    expect(st).toEqual({ state: "S", startTimeTicks: "987654", pgrp: 4242 });
    expect(parsePidStat("garbage")).toBeUndefined();
  });

  it("identifies a live process by pid and start time, not pid alone", async () => {
    const st = await readPidStat(process.pid);
    expect(st?.startTimeTicks).toMatch(/^\d+$/);
    expect(await isSameProcessAlive(process.pid, st?.startTimeTicks ?? "")).toBe(true);
    expect(await isSameProcessAlive(process.pid, "1")).toBe(false);
    expect(await isSameProcessAlive(2 ** 22 + 12345, "1")).toBe(false);
    expect(await readRssBytes(process.pid)).toBeGreaterThan(0);
  });

  it("parses /proc/meminfo with and without MemAvailable", () => {
    expect(parseMeminfo("MemTotal:       16000 kB\nMemFree:  1000 kB\nMemAvailable:   4000 kB\n")).toEqual({ totalBytes: 16000 * 1024, usedBytes: 12000 * 1024 });
    expect(parseMeminfo("MemTotal: 100 kB\nMemFree: 10 kB\nBuffers: 5 kB\nCached: 5 kB\n")).toEqual({ totalBytes: 102400, usedBytes: 80 * 1024 });
  });

  it("finds listening sockets in /proc/net/tcp", async () => {
    const text = [
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode",
      "   0: 0100007F:9C40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 12345 1 0000000000000000 100 0 0 10 0",
      "   1: 0100007F:9C41 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000        0 12346 1 0000000000000000 20 4 30 10 -1",
    ].join("\n");
    expect(parseProcNetTcp(text)).toEqual([{ port: 40000, inode: "12345" }]);
    // the real file parses too
    expect(Array.isArray(parseProcNetTcp(await readFile("/proc/net/tcp", "utf8")))).toBe(true);
  });
});
