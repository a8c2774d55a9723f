import { constants, createReadStream } from "node:fs";
import { link, lstat, mkdir, open, readdir, rm, symlink } from "node:fs/promises";
import { join, posix } from "node:path";
import { PassThrough, pipeline } from "node:stream";
import { createGunzip } from "node:zlib";
import { Code, WardenError, abortReason } from "@warden/common";

/** Bounds of one bundle's unpacking (backend-bundle.ts passes them; docs/artifacts.md lists them). */
export interface TarLimits {
  /** Sum of the regular files' sizes over every layer. */
  readonly maxTotalBytes: number;
  /** Entries over every layer. */
  readonly maxEntries: number;
  /**
   * What the destination can take (the artifact cache's room, backend-bundle.ts),
   * counted as maxTotalBytes is; undefined = only maxTotalBytes bounds it.
   * Passing it is RESOURCE_EXHAUSTED with `details.reason` tarNoRoomReason, not
   * an unsafe archive: the same bundle may fit once the cache has room.
   */
  readonly roomBytes?: number;
}

/** Longest entry path or link target. */
export const maxTarPathChars = 4096;
/** Largest pax extended header or GNU long-name record. */
export const maxTarMetaBytes = 1024 * 1024;

/** Counts shared by the layers of one bundle, so the bounds hold for the whole. */
export interface TarTally {
  bytes: number;
  entries: number;
}

/** `details.reason` of an unpacking stopped at TarLimits.roomBytes. */
export const tarNoRoomReason = "no-room";

/** `details.reason` of a bundle that is refused for what it holds (start-backend.ts reports it as SPAWN_FAILED, not a source failure). */
export const unsafeBundleReason = "unsafe-bundle";

function refused(why: string): WardenError {
  return new WardenError(Code.FailedPrecondition, `unsafe archive: ${why}`, { details: { reason: unsafeBundleReason } });
}

/** Pulls exact byte counts out of a chunk stream. */
class ByteReader {
  private buf: Buffer = Buffer.alloc(0);
  private done = false;
  constructor(private readonly it: AsyncIterator<Buffer>) {}

  private async fill(n: number): Promise<boolean> {
    while (this.buf.length < n && !this.done) {
      const r = await this.it.next();
      if (r.done === true) this.done = true;
      else this.buf = this.buf.length === 0 ? r.value : Buffer.concat([this.buf, r.value]);
    }
    return this.buf.length >= n;
  }

  /** Exactly n bytes, or undefined at the stream's end (fewer left). */
  async read(n: number): Promise<Buffer | undefined> {
    if (!(await this.fill(n))) return undefined;
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    return out;
  }

  /** Drops the next n bytes. */
  async skip(n: number): Promise<void> {
    let left = n;
    while (left > 0) {
      if (!(await this.fill(1))) throw refused("the archive ends inside an entry");
      const take = Math.min(left, this.buf.length);
      this.buf = this.buf.subarray(take);
      left -= take;
    }
  }

  /** The next n bytes in pieces (a file's body, never held whole). */
  async *pieces(n: number): AsyncGenerator<Buffer> {
    let left = n;
    while (left > 0) {
      if (!(await this.fill(1))) throw refused("the archive ends inside an entry");
      const take = Math.min(left, this.buf.length);
      const out = this.buf.subarray(0, take);
      this.buf = this.buf.subarray(take);
      left -= take;
      yield out;
    }
  }
}

/** A numeric header field: octal text, or GNU base-256 when the high bit is set. */
function num(b: Buffer): number {
  if (((b[0] ?? 0) & 0x80) !== 0) {
    let v = 0;
    for (let i = 1; i < b.length; i++) v = v * 256 + (b[i] ?? 0);
    return v;
  }
  const s = b.toString("latin1").replace(/\0.*$/s, "").trim();
  return s === "" ? 0 : parseInt(s, 8);
}

function text(b: Buffer): string {
  const z = b.indexOf(0);
  return b.subarray(0, z === -1 ? b.length : z).toString("utf8");
}

/** pax records `<len> key=value\n` → map. */
function parsePax(b: Buffer): Record<string, string> {
  const out: Record<string, string> = {};
  let at = 0;
  while (at < b.length) {
    const sp = b.indexOf(0x20, at);
    if (sp === -1) break;
    const len = parseInt(b.subarray(at, sp).toString("latin1"), 10);
    if (!Number.isSafeInteger(len) || len <= 0 || at + len > b.length) throw refused("a malformed pax header");
    const rec = b.subarray(sp + 1, at + len - 1).toString("utf8");
    const eq = rec.indexOf("=");
    if (eq > 0) out[rec.slice(0, eq)] = rec.slice(eq + 1);
    at += len;
  }
  return out;
}

/** An entry's path made relative and checked: no absolute path, no "..", nothing that leaves the directory. "" = the root itself. */
export function safeEntryPath(raw: string): string {
  if (raw.length > maxTarPathChars) throw refused(`an entry path longer than ${String(maxTarPathChars)} characters`);
  if (raw.includes("\0")) throw refused("an entry path with a NUL byte");
  if (raw.startsWith("/")) throw refused(`the absolute entry path ${JSON.stringify(raw.slice(0, 128))}`);
  const segs = raw.split("/").filter((s) => s !== "" && s !== ".");
  if (segs.includes("..")) throw refused(`the entry path ${JSON.stringify(raw.slice(0, 128))} has a ".." segment`);
  return segs.join("/");
}

/** A symlink target that stays inside the directory from where the link sits; anything absolute or climbing out is refused. */
export function checkLinkTarget(entry: string, target: string): void {
  if (target === "" || target.length > maxTarPathChars || target.includes("\0")) throw refused(`the link ${JSON.stringify(entry.slice(0, 128))} has an empty or overlong target`);
  if (target.startsWith("/")) throw refused(`the symlink ${JSON.stringify(entry.slice(0, 128))} points to the absolute path ${JSON.stringify(target.slice(0, 128))}`);
  const resolved = posix.normalize(posix.join(posix.dirname(entry), target));
  if (resolved === ".." || resolved.startsWith("../")) throw refused(`the symlink ${JSON.stringify(entry.slice(0, 128))} points out of the directory (${JSON.stringify(target.slice(0, 128))})`);
}

/** The archive's bytes, gunzipped when they start with gzip's magic; zstd is refused by name. */
async function openLayer(file: string, signal: AbortSignal): Promise<AsyncIterator<Buffer>> {
  const h = await open(file, "r");
  const head = Buffer.alloc(4);
  try {
    await h.read(head, 0, 4, 0);
  } finally {
    await h.close();
  }
  if (head.readUInt32BE(0) === 0x28b52ffd) throw new WardenError(Code.FailedPrecondition, "a zstd-compressed layer; only tar and tar+gzip layers are supported");
  const raw = createReadStream(file, { signal });
  if (head[0] !== 0x1f || head[1] !== 0x8b) return raw[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  const out = new PassThrough();
  pipeline(raw, createGunzip(), out, () => {});
  return out[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
}

/**
 * Unpacks one tar (or tar+gzip) layer into `dest`, over what earlier layers
 * left there (OCI whiteouts `.wh.<name>` and `.wh..wh..opq` remove lower
 * layers' files). Safe against hostile archives: no absolute path or ".."
 * entry, no symlink that points out of `dest` or anywhere absolute, nothing
 * written through a symlink (a parent that is a symlink is refused; files are
 * created O_EXCL|O_NOFOLLOW after the old entry is removed), no device, fifo
 * or setuid bit, and the sizes and entry counts in `tally` stay under
 * `limits`. Failures: FAILED_PRECONDITION naming the entry, RESOURCE_EXHAUSTED
 * past `limits.roomBytes`; the caller removes `dest`.
 */
export async function extractLayer(file: string, dest: string, limits: TarLimits, tally: TarTally, signal: AbortSignal): Promise<void> {
  const r = new ByteReader(await openLayer(file, signal));
  const dirs = new Set<string>([""]);
  const written = new Set<string>();
  let pax: Record<string, string> = {};
  let longName: string | undefined;
  let longLink: string | undefined;

  /** Creates `rel`'s directories, refusing any that is a symlink. */
  const ensureDir = async (rel: string): Promise<void> => {
    if (dirs.has(rel)) return;
    await ensureDir(posix.dirname(rel) === "." ? "" : posix.dirname(rel));
    const abs = join(dest, rel);
    const st = await lstat(abs).catch(() => undefined);
    if (st?.isSymbolicLink() === true) throw refused(`an entry is written through the symlink ${JSON.stringify(rel.slice(0, 128))}`);
    if (st !== undefined && !st.isDirectory()) await rm(abs, { force: true });
    if (st?.isDirectory() !== true) await mkdir(abs, { mode: 0o755 });
    dirs.add(rel);
  };
  const clear = async (rel: string): Promise<void> => {
    const st = await lstat(join(dest, rel)).catch(() => undefined);
    if (st !== undefined && !(st.isDirectory() && !st.isSymbolicLink())) await rm(join(dest, rel), { force: true });
  };

  for (;;) {
    if (signal.aborted) throw abortReason(signal);
    const h = await r.read(512);
    if (h === undefined) throw refused("the archive ends without its end-of-archive block");
    if (h.every((b) => b === 0)) return;
    let sum = 0;
    for (let i = 0; i < 512; i++) sum += i >= 148 && i < 156 ? 0x20 : (h[i] ?? 0);
    if (sum !== num(h.subarray(148, 156))) throw refused("a header with a wrong checksum (not a tar archive, or a damaged one)");
    const type = String.fromCharCode(h[156] ?? 0);
    const size = pax.size !== undefined ? Number(pax.size) : num(h.subarray(124, 136));
    if (!Number.isSafeInteger(size) || size < 0) throw refused("an entry with an invalid size");
    const padded = Math.ceil(size / 512) * 512;
    if (type === "x" || type === "g" || type === "L" || type === "K") {
      if (size > maxTarMetaBytes) throw refused(`a metadata record of ${String(size)} bytes`);
      const body = (await r.read(padded))?.subarray(0, size);
      if (body === undefined) throw refused("the archive ends inside a metadata record");
      if (type === "x") pax = parsePax(body);
      else if (type === "L") longName = text(body);
      else if (type === "K") longLink = text(body);
      continue;
    }
    if (++tally.entries > limits.maxEntries) throw refused(`more than ${String(limits.maxEntries)} entries`);
    const prefix = h.subarray(257, 262).toString("latin1") === "ustar" ? text(h.subarray(345, 500)) : "";
    const name = pax.path ?? longName ?? (prefix === "" ? text(h.subarray(0, 100)) : `${prefix}/${text(h.subarray(0, 100))}`);
    const linkName = pax.linkpath ?? longLink ?? text(h.subarray(157, 257));
    const mode = num(h.subarray(100, 108));
    pax = {};
    longName = undefined;
    longLink = undefined;
    const rel = safeEntryPath(name);
    const base = posix.basename(rel);
    const parent = posix.dirname(rel) === "." ? "" : posix.dirname(rel);
    const isFile = type === "0" || type === "\0" || type === "7";
    if (rel === "" || !isFile) {
      await r.skip(padded);
    }
    if (rel === "") continue;
    if (base.startsWith(".wh.")) {
      await ensureDir(parent);
      if (base === ".wh..wh..opq") {
        // Opaque directory: what lower layers left in it goes; this layer's own entries stay.
        for (const child of await readdir(join(dest, parent))) {
          const c = parent === "" ? child : `${parent}/${child}`;
          if (!written.has(c)) await rm(join(dest, c), { recursive: true, force: true });
        }
      } else {
        const victim = safeEntryPath(parent === "" ? base.slice(4) : `${parent}/${base.slice(4)}`);
        if (victim !== "") await rm(join(dest, victim), { recursive: true, force: true });
        for (const d of [...dirs]) if (d === victim || d.startsWith(`${victim}/`)) dirs.delete(d);
      }
      continue;
    }
    await ensureDir(parent);
    written.add(rel);
    const abs = join(dest, rel);
    switch (type) {
      case "5":
        await ensureDir(rel);
        break;
      case "2":
        checkLinkTarget(rel, linkName);
        await rm(abs, { recursive: true, force: true });
        dirs.delete(rel);
        await symlink(linkName, abs);
        break;
      case "1": {
        const target = safeEntryPath(linkName);
        const st = await lstat(join(dest, target)).catch(() => undefined);
        if (st?.isFile() !== true) throw refused(`the hard link ${JSON.stringify(rel.slice(0, 128))} names ${JSON.stringify(target.slice(0, 128))}, not a regular file of the archive`);
        await clear(rel);
        await link(join(dest, target), abs);
        break;
      }
      default: {
        if (!isFile) throw refused(`the entry ${JSON.stringify(rel.slice(0, 128))} is a device or fifo (type ${JSON.stringify(type)})`);
        tally.bytes += size;
        if (tally.bytes > limits.maxTotalBytes) throw refused(`more than ${String(limits.maxTotalBytes)} bytes unpacked`);
        // Checked before the file is created: the unpacking stops at the first file that would pass the room.
        if (limits.roomBytes !== undefined && tally.bytes > limits.roomBytes) throw new WardenError(Code.ResourceExhausted, `more than ${String(limits.roomBytes)} bytes unpacked`, { details: { reason: tarNoRoomReason } });
        const st = await lstat(abs).catch(() => undefined);
        if (st !== undefined) await rm(abs, { recursive: true, force: true });
        dirs.delete(rel);
        // No setuid/setgid/sticky; the owner can always read and write.
        const fh = await open(abs, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, (mode & 0o755) | 0o600);
        try {
          for await (const piece of r.pieces(size)) await fh.write(piece);
        } finally {
          await fh.close();
        }
        await r.skip(padded - size);
      }
    }
  }
}
