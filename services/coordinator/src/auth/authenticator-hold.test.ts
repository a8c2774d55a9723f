import { describe, expect, it } from "vitest";
import { Code, WardenError, nullLogger } from "@warden/common";
import { Authenticator, roleReaches } from "./authenticator.js";
import { TokenTable, mintToken, tokenLine, type Principal } from "./token-table.js";

const viewerOrAbove = (p: Principal): WardenError | undefined => (roleReaches(p.role, "viewer") ? undefined : new WardenError(Code.PermissionDenied, "needs viewer"));

describe("Authenticator: held streams on reload", () => {
  it("ends a stream whose token is gone (UNAUTHENTICATED) or no longer allows it (its own reason), once; keeps the rest; a released stream is never ended", () => {
    const [kept, dropped, narrowed, released] = [mintToken(), mintToken(), mintToken(), mintToken()];
    const table = (lines: string[]): TokenTable => TokenTable.parse(lines.join("\n"), "f");
    const authn = new Authenticator(table([tokenLine(kept, "viewer"), tokenLine(dropped, "viewer"), tokenLine(narrowed, "viewer"), tokenLine(released, "viewer")]), nullLogger);
    const ended = new Map<string, Code[]>();
    const hold = (name: string, token: string): (() => void) =>
      authn.hold(token, { what: "test", caller: () => name, allows: viewerOrAbove, end: (why) => ended.set(name, [...(ended.get(name) ?? []), why.code]) });
    for (const [n, t] of [["kept", kept], ["dropped", dropped], ["narrowed", narrowed]] as const) hold(n, t);
    hold("released", released)();
    expect(authn.heldStreams).toBe(3);
    authn.replace(table([tokenLine(kept, "viewer"), tokenLine(narrowed, "inference")]));
    expect(Object.fromEntries(ended)).toEqual({ dropped: [Code.Unauthenticated], narrowed: [Code.PermissionDenied] });
    expect(authn.heldStreams).toBe(1);
    // A second reload ends nothing twice.
    authn.replace(table([tokenLine(narrowed, "inference")]));
    expect(Object.fromEntries(ended)).toEqual({ dropped: [Code.Unauthenticated], narrowed: [Code.PermissionDenied], kept: [Code.Unauthenticated] });
    expect(authn.heldStreams).toBe(0);
  });
});
