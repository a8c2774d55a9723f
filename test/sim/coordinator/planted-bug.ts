/**
 * The hook through which a run switches on one planted bug (issue 13 item 6)
 * in the production code. The `sim-bugs` branch defines the production-side
 * switch; until it lands this only records the name (see test/sim/README.md).
 *
 * TODO(sim-bugs): call the production test-only switch here, e.g.
 * `setPlantedBug(name)` from the module sim-bugs adds, and reset it in `clearPlantedBug`.
 */
let active: string | undefined;

export function applyPlantedBug(name: string | undefined): void {
  active = name;
}

export function clearPlantedBug(): void {
  active = undefined;
}

export function activePlantedBug(): string | undefined {
  return active;
}
