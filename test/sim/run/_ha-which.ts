import { optionsForSeed } from "./sim-options.js";
const from = Number(process.argv[2]); const to = Number(process.argv[3]);
const out: number[] = [];
for (let s = from; s <= to; s++) if (optionsForSeed(s).ha !== undefined) out.push(s);
console.log(out.join(" "));
