/**
 * The hook through which a run switches on one planted bug
 * in the production code, through the test-only switch
 * `@warden/common/testing/planted-bugs` (packages/common/src/planted-bugs.ts).
 * An unknown name throws, so a typo never silently tests nothing.
 */
import { plantBugs, plantedBugNames, type PlantedBug } from "@warden/common/testing/planted-bugs";

let undo: (() => void) | undefined;
let active: PlantedBug | undefined;

function asPlantedBug(name: string): PlantedBug {
  const known = plantedBugNames.find((b) => b === name);
  if (known === undefined) throw new RangeError(`unknown planted bug "${name}"; known: ${plantedBugNames.join(", ")}`);
  return known;
}

export function applyPlantedBug(name: string | undefined): void {
  clearPlantedBug();
  if (name === undefined) return;
  active = asPlantedBug(name);
  undo = plantBugs([active]);
}

export function clearPlantedBug(): void {
  undo?.();
  undo = undefined;
  active = undefined;
}

export function activePlantedBug(): string | undefined {
  return active;
}
