export * from "./file-journal.js";
export * from "./record-codec.js";
