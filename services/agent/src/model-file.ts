import { realpath } from "node:fs/promises";
import { isAbsolute, join, normalize, sep } from "node:path";
import { invalidArgument } from "@warden/common";

/** Longest modelFile accepted (a path, not a file's content). */
export const maxModelFileChars = 4096;

function inside(root: string, path: string): boolean {
  return path === root || path.startsWith(root.endsWith(sep) ? root : root + sep);
}

/**
 * Resolves a requested model file under the agent's models root and proves it
 * stays there (path traversal). Refused, naming `field`:
 * - control characters, more than {@link maxModelFileChars} characters;
 * - any `..` segment, even one that would land inside (no games with the path);
 * - an absolute path outside the root;
 * - a file that does not exist (a backend would fail later, less clearly);
 * - a path whose real location (symlinks followed) is outside the root's real
 *   location. Symlinks that stay inside are fine (the Hugging Face cache links
 *   snapshots to blobs).
 * Returns the lexical absolute path (root + file), not the symlink target:
 * backends look for siblings by name (piper's `voice.onnx.json`), and the check
 * above already proved where it leads. Empty stays empty: no file.
 */
export async function resolveModelFile(field: string, modelFile: string, modelsPath: string | undefined): Promise<string> {
  if (modelFile === "") return "";
  // eslint-disable-next-line no-control-regex
  if (modelFile.length > maxModelFileChars || /[\u0000-\u001f\u007f]/.test(modelFile)) throw invalidArgument(field, `must be at most ${String(maxModelFileChars)} characters without control characters`);
  const shown = JSON.stringify(modelFile.slice(0, 128));
  if (modelsPath === undefined) throw invalidArgument(field, `this agent has no modelsPath, so it serves no model files (asked for ${shown}); set modelsPath in the agent config`);
  if (modelFile.split(/[/\\]/).includes("..")) throw invalidArgument(field, `must not contain a ".." segment, got ${shown}`);
  const root = normalize(modelsPath);
  const lexical = isAbsolute(modelFile) ? normalize(modelFile) : join(root, modelFile);
  if (!inside(root, lexical)) throw invalidArgument(field, `${shown} is outside the models directory ${root}`);
  let realRoot: string;
  try {
    realRoot = await realpath(root);
  } catch (err) {
    throw invalidArgument(field, `the models directory ${root} is not readable: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
  }
  let real: string;
  try {
    real = await realpath(lexical);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw invalidArgument(field, code === "ENOENT" ? `no such file ${lexical} under the models directory` : `cannot resolve ${lexical}: ${code ?? String(err)}`);
  }
  if (!inside(realRoot, real)) throw invalidArgument(field, `${shown} leads outside the models directory ${root} through a symlink (to ${real.slice(0, 256)})`);
  return lexical;
}
