/**
 * Warden's release version: printed by `warden --version`, sent by agents in
 * Register and compared by the coordinator (a mismatch is logged as a warning
 * and shown in ListNodes). Kept equal to services/cli/package.json's version,
 * which names the installable tarball (a test checks the two agree).
 */
export const wardenVersion = "0.1.0";
