/**
 * The sequence of this agent boot's Heartbeat reports. One owner: the
 * heartbeat loop stamps the next number *before* it reads the inventory, and
 * StartBackend reads the last one stamped when a process enters the table
 * (sent in `Spawned`). So a report numbered at or below what a start read was
 * taken before that process existed: the coordinator does not count its
 * absence there as the process vanishing — a timed-out Heartbeat overtaken by
 * the next one may land after the start's Ready.
 */
export class ReportSequence {
  private last = 0n;

  /** Stamps the next report. */
  next(): bigint {
    this.last += 1n;
    return this.last;
  }

  /** The last report stamped (0 before the first). */
  current(): bigint {
    return this.last;
  }
}
