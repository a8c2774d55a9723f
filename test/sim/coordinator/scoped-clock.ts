import type { Cancel, Clock } from "@warden/common";
import type { VirtualClock } from "../kernel/virtual-clock.js";

/**
 * The clock one coordinator generation sees: the shared virtual clock, but
 * every timer it arms is cancelled when that generation crashes, so a dead
 * coordinator never acts again. With `pausedUntil` (the HA profile's SIGSTOP
 * of a coordinator process), a timer or a delivery (`run`) due while the
 * process is stopped runs when it resumes, in the order it was due.
 */
export class ScopedClock implements Clock {
  private readonly cancels = new Set<Cancel>();
  private dead = false;
  private waiting: (() => void)[] = [];
  private resumeArmed = false;

  constructor(
    private readonly base: VirtualClock,
    private readonly pausedUntil: () => number = () => 0,
  ) {}

  now(): number {
    return this.base.now();
  }

  wallNow(): number {
    return this.base.wallNow();
  }

  setTimer(delayMs: number, fn: () => void): Cancel {
    if (this.dead) return () => {};
    let cancelled = false;
    const c = this.base.setTimer(delayMs, () => {
      this.cancels.delete(c);
      if (!this.dead) this.run(() => {
        if (!cancelled) fn();
      });
    });
    this.cancels.add(c);
    return () => {
      cancelled = true;
      this.cancels.delete(c);
      c();
    };
  }

  /** Runs `fn` now, or when the process resumes if it is stopped; never once it is dead. */
  run(fn: () => void): void {
    if (this.dead) return;
    if (this.paused()) {
      this.waiting.push(fn);
      this.armResume();
      return;
    }
    fn();
  }

  /** Stopped (SIGSTOP) at this instant. */
  paused(): boolean {
    return this.base.now() < this.pausedUntil();
  }

  private armResume(): void {
    if (this.resumeArmed) return;
    this.resumeArmed = true;
    this.base.setTimer(this.pausedUntil() - this.base.now(), () => {
      this.resumeArmed = false;
      if (this.dead) return;
      if (this.paused()) {
        this.armResume();
        return;
      }
      const q = this.waiting;
      this.waiting = [];
      for (const f of q) this.run(f);
    });
  }

  alive(): boolean {
    return !this.dead;
  }

  kill(): void {
    this.dead = true;
    this.waiting = [];
    for (const c of this.cancels) c();
    this.cancels.clear();
  }
}
