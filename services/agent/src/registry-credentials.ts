import { WardenError, type Logger } from "@warden/common";
import { readRegistryAuthFile, registryLoginFor, type RegistryAuthFile, type RegistryLoginLookup, type RegistryLogins } from "./registry-auth.js";

/** A mode for messages: "0644". */
export function modeText(mode: number): string {
  return `0${mode.toString(8).padStart(3, "0")}`;
}

/**
 * The credentials `registryAuthFile` holds, as the agent uses them: read at
 * start, read again by {@link reload} (main.ts on SIGHUP) with the file
 * checked whole before it replaces anything, so a bad edit keeps the
 * credentials in use. Pulls look a registry up when they start
 * ({@link lookup}); a pull under way keeps the login it began with. Logs
 * only the file's path, the number of registries and its mode, never a
 * name or password.
 */
export class RegistryCredentials {
  private logins: RegistryLogins;
  private readonly log: Logger;

  /** `first` is the file as already read (main.ts reads it before the logger exists, for --check-config). */
  constructor(
    private readonly path: string,
    private readonly field: string,
    logger: Logger,
    first: RegistryAuthFile = readRegistryAuthFile(path, field),
  ) {
    this.log = logger.child({ component: "registry-auth" });
    this.logins = first.logins;
    this.log.info("registry credentials read", { file: path, registries: first.logins.size });
    this.warnIfExposed(first);
  }

  /** The login for a registry host; undefined = anonymous. */
  readonly lookup: RegistryLoginLookup = (host) => registryLoginFor(this.logins, host);

  /** Reads the file again; true when its credentials replaced the old ones, false (logged) when it was refused. */
  reload(): boolean {
    let next: RegistryAuthFile;
    try {
      next = readRegistryAuthFile(this.path, this.field);
    } catch (err) {
      this.log.error("registry credentials reload refused; keeping the ones read before", { file: this.path, err: WardenError.from(err).rawMessage });
      return false;
    }
    this.logins = next.logins;
    this.log.info("registry credentials reloaded", { file: this.path, registries: next.logins.size });
    this.warnIfExposed(next);
    return true;
  }

  private warnIfExposed(f: RegistryAuthFile): void {
    if (f.exposedMode === undefined) return;
    this.log.warn(`${this.field} is readable by group or others: chmod 600 it`, { file: this.path, mode: modeText(f.exposedMode) });
  }
}
