import { create, toBinary, type DescMessage, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";

/** Messages encoded when made: the servers and clients send these bytes instead of encoding the message again. */
const encodings = new WeakMap<object, Buffer>();

/**
 * A message that is sent many times unchanged (a heartbeat's usual answer),
 * encoded once here: every send of this object reuses the bytes instead of
 * walking the schema twice (create, then toBinary) per send. The message is
 * frozen, so the bytes can never disagree with it; make a new one for new
 * values. Its encoding is dropped with it (a WeakMap).
 */
export function encodedOnce<Desc extends DescMessage>(schema: Desc, init: MessageInitShape<Desc>): Readonly<MessageShape<Desc>> {
  const message = create(schema, init);
  const bytes = toBinary(schema, message);
  encodings.set(message, Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
  return Object.freeze(message);
}

/** The bytes encodedOnce made for `value`; undefined for any other value. Senders copy them into their frame and never write to them. */
export function encodingOf(value: unknown): Buffer | undefined {
  return typeof value === "object" && value !== null ? encodings.get(value) : undefined;
}

/**
 * `message` sent as `bytes`, which its maker encoded from it piece by piece
 * (a large answer encoded in slices between turns of the event loop, so no
 * one turn encodes all of it). The maker guarantees they agree; the message
 * is frozen, so they stay so.
 */
export function withEncoding<T extends object>(message: T, bytes: Uint8Array): Readonly<T> {
  encodings.set(message, Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
  return Object.freeze(message);
}
