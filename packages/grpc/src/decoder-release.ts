import { StreamDecoder } from "@grpc/grpc-js/build/src/stream-decoder.js";

/**
 * grpc-js (1.14) reads each call's messages with a StreamDecoder that keeps,
 * between one message and the next, slices of the last one: the byte of its
 * compression flag and the pieces of its body, each a view of the HTTP/2 DATA
 * chunk it came in. On a stream that carries a message a second (a heartbeat)
 * they live about a second, through two young-generation collections, and are
 * promoted per stream per message, to die in the old generation: at 5 000
 * nodes about 14 % of what the coordinator promoted (a sampling heap profile
 * of what outlived the young generation). Once a message is complete they are
 * dropped here: the next message starts with both fields assigned anew, so
 * nothing reads them in between.
 */

/** What the patch reads and writes of a decoder: grpc-js's private fields, checked to be there. */
interface DecoderFields {
  readState: number;
  readCompressFlag: Buffer;
  readPartialMessage: Buffer[];
  write: (this: DecoderFields, data: Buffer) => Buffer[];
}

/** grpc-js's ReadState.NO_DATA: between messages. */
const noData = 0;
const noFlag = Buffer.alloc(0);
/** Frozen: were grpc-js ever to push onto it without assigning a fresh list first, that would throw, not mix two messages. */
const noPieces: Buffer[] = Object.freeze([]) as unknown as Buffer[];
let installed: boolean | undefined;

/** Whether a decoder has the fields this patch expects (a grpc-js that renamed them is left alone). */
function shaped(d: object): d is DecoderFields {
  const f = d as Partial<DecoderFields>;
  return f.readState === noData && Buffer.isBuffer(f.readCompressFlag) && Array.isArray(f.readPartialMessage) && typeof f.write === "function";
}

/**
 * Installs the release on grpc-js's StreamDecoder, once per process; true
 * when it is in place. False when this grpc-js's decoder is not the shape it
 * was written for (then nothing is changed; the test of this file fails on
 * such an upgrade).
 */
export function releaseDecodedSlices(): boolean {
  if (installed !== undefined) return installed;
  const proto = StreamDecoder.prototype as unknown as DecoderFields;
  if (!shaped(new StreamDecoder(-1))) {
    installed = false;
    return false;
  }
  const write = proto.write;
  proto.write = function releasing(this: DecoderFields, data: Buffer): Buffer[] {
    const out = write.call(this, data);
    if (this.readState === noData) {
      this.readCompressFlag = noFlag;
      this.readPartialMessage = noPieces;
    }
    return out;
  };
  installed = true;
  return true;
}
