/**
 * A RIFF/WAVE file around 16-bit mono PCM (TTSStream backends send raw samples
 * after a sample-rate message). One copy for the OpenAI speech route, `warden
 * tts` and backend-sim's TTS.
 */
export function wavFile(pcm: Uint8Array, sampleRate: number): Buffer {
  const h = Buffer.alloc(44);
  h.write("RIFF", 0);
  h.writeUInt32LE(36 + pcm.length, 4);
  h.write("WAVEfmt ", 8);
  h.writeUInt32LE(16, 16);
  h.writeUInt16LE(1, 20);
  h.writeUInt16LE(1, 22);
  h.writeUInt32LE(sampleRate, 24);
  h.writeUInt32LE(sampleRate * 2, 28);
  h.writeUInt16LE(2, 32);
  h.writeUInt16LE(16, 34);
  h.write("data", 36);
  h.writeUInt32LE(pcm.length, 40);
  return Buffer.concat([h, pcm]);
}

/** The sample rate a TTSStream backend announces in its first message (`{"sample_rate": 16000}`), if it does. */
export function sampleRateOf(message: Uint8Array): number | undefined {
  try {
    const v = (JSON.parse(new TextDecoder().decode(message)) as { sample_rate?: unknown }).sample_rate;
    return typeof v === "number" && Number.isInteger(v) && v > 0 && v <= 1_000_000 ? v : undefined;
  } catch {
    return undefined;
  }
}
