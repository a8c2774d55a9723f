// The test-only switch for planted bugs (see ../planted-bugs.ts). Only the
// simulation and its tests import this entry; eslint forbids it elsewhere.
export { plantBugs, plantedBugs } from "../planted-bugs.js";
export { plantedBugNames, type PlantedBug } from "../planted-bugs.js";
