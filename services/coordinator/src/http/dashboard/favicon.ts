/**
 * /favicon.ico, drawn here (16×16, 32-bit BMP in an ICO) so the dashboard
 * ships no binary file and a browser's request for it does not 404: a dark
 * tile with a green dot, the header's colours.
 */
function drawIco(): Buffer {
  const size = 16;
  const header = Buffer.alloc(6);
  header.writeUInt16LE(0, 0);
  header.writeUInt16LE(1, 2); // icon
  header.writeUInt16LE(1, 4); // one image
  const pixels = Buffer.alloc(size * size * 4);
  for (let y = 0; y < size; y++) {
    for (let x = 0; x < size; x++) {
      // BMP rows go bottom-up; BGRA.
      const o = ((size - 1 - y) * size + x) * 4;
      const corner = (x === 0 || x === size - 1) && (y === 0 || y === size - 1);
      const d = Math.hypot(x - 7.5, y - 7.5);
      const [r, g, b, a] = corner ? [0, 0, 0, 0] : d < 4.5 ? [0x2e, 0x9e, 0x44, 255] : [0x20, 0x23, 0x2a, 255];
      pixels.writeUInt8(b, o);
      pixels.writeUInt8(g, o + 1);
      pixels.writeUInt8(r, o + 2);
      pixels.writeUInt8(a, o + 3);
    }
  }
  const mask = Buffer.alloc(size * 4); // AND mask: 1 bit a pixel, rows padded to 4 bytes; alpha decides
  const info = Buffer.alloc(40);
  info.writeUInt32LE(40, 0);
  info.writeInt32LE(size, 4);
  info.writeInt32LE(size * 2, 8); // image and mask
  info.writeUInt16LE(1, 12);
  info.writeUInt16LE(32, 14);
  info.writeUInt32LE(pixels.length + mask.length, 20);
  const image = Buffer.concat([info, pixels, mask]);
  const entry = Buffer.alloc(16);
  entry.writeUInt8(size, 0);
  entry.writeUInt8(size, 1);
  entry.writeUInt16LE(1, 4);
  entry.writeUInt16LE(32, 6);
  entry.writeUInt32LE(image.length, 8);
  entry.writeUInt32LE(header.length + entry.length, 12);
  return Buffer.concat([header, entry, image]);
}

export const faviconIco: Buffer = drawIco();
