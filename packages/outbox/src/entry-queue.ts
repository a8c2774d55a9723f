/**
 * A FIFO of entries with O(1) push, shift and pop (the youngest entry): the
 * consumed prefix is reclaimed now and then, so memory stays proportional to
 * what is queued.
 */
export class EntryQueue<T> {
  private items: T[] = [];
  private head = 0;

  get size(): number {
    return this.items.length - this.head;
  }

  push(item: T): void {
    this.items.push(item);
  }

  peek(): T | undefined {
    return this.head < this.items.length ? this.items[this.head] : undefined;
  }

  shift(): T | undefined {
    if (this.head >= this.items.length) return undefined;
    const item = this.items[this.head];
    this.head++;
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return item;
  }

  /** Removes and returns the youngest entry. */
  pop(): T | undefined {
    if (this.head >= this.items.length) return undefined;
    return this.items.pop();
  }
}
