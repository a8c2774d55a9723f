import { crc32, deflateSync } from "node:zlib";
import type { GenerateImageRequest } from "@warden/proto";
import { writeDst } from "./sim-dst.js";

/** Largest side the simulator paints (a request for more gets this). */
export const simMaxImageSide = 1024;

function chunk(type: string, data: Buffer): Buffer {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, "latin1"), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(body) >>> 0);
  return Buffer.concat([len, body, crc]);
}

/** A colour from the prompt: the same prompt always paints the same image. */
export function simImageColour(prompt: string): [number, number, number] {
  let h = 2166136261;
  for (let i = 0; i < prompt.length; i++) h = Math.imul(h ^ prompt.charCodeAt(i), 16777619);
  return [h & 0xff, (h >>> 8) & 0xff, (h >>> 16) & 0xff];
}

/** A valid PNG of one colour, `width` × `height` (8-bit RGB). */
export function simPng(width: number, height: number, rgb: readonly [number, number, number]): Buffer {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr.writeUInt8(8, 8); // bit depth
  ihdr.writeUInt8(2, 9); // colour type: RGB
  const row = Buffer.alloc(1 + width * 3);
  for (let x = 0; x < width; x++) row.set(rgb, 1 + x * 3);
  const raw = Buffer.concat(Array.from({ length: height }, () => row));
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk("IHDR", ihdr), chunk("IDAT", deflateSync(raw)), chunk("IEND", Buffer.alloc(0))]);
}

/** GenerateImage as a diffusers backend answers it: the image written at `dst`, success with the path. */
export function simGenerateImage(req: GenerateImageRequest): { success: boolean; message: string } {
  const side = (n: number): number => Math.min(Math.max(n, 1), simMaxImageSide);
  writeDst(req.dst, simPng(side(req.width === 0 ? 512 : req.width), side(req.height === 0 ? 512 : req.height), simImageColour(req.positivePrompt)));
  return { success: true, message: req.dst };
}
