import type { Cancel, Clock } from "@warden/common";
import type { VirtualClock } from "../kernel/virtual-clock.js";

/**
 * The clock one coordinator generation sees: the shared virtual clock, but
 * every timer it arms is cancelled when that generation crashes, so a dead
 * coordinator never acts again.
 */
export class ScopedClock implements Clock {
  private readonly cancels = new Set<Cancel>();
  private dead = false;

  constructor(private readonly base: VirtualClock) {}

  now(): number {
    return this.base.now();
  }

  wallNow(): number {
    return this.base.wallNow();
  }

  setTimer(delayMs: number, fn: () => void): Cancel {
    if (this.dead) return () => {};
    const c = this.base.setTimer(delayMs, () => {
      this.cancels.delete(c);
      if (!this.dead) fn();
    });
    this.cancels.add(c);
    return () => {
      this.cancels.delete(c);
      c();
    };
  }

  alive(): boolean {
    return !this.dead;
  }

  kill(): void {
    this.dead = true;
    for (const c of this.cancels) c();
    this.cancels.clear();
  }
}
