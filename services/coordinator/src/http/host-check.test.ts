import { describe, expect, it } from "vitest";
import { resolveCoordinatorConfig } from "../config/coordinator-config.js";
import { acceptedHosts, hostOfHeader, maxAllowedHosts, parseAllowedHosts } from "./host-check.js";

describe("http.allowedHosts", () => {
  it("takes host names and IP addresses, normalised; refuses ports, junk and too many, naming the entry", () => {
    expect(parseAllowedHosts(["Warden.LAN", "10.0.0.5", "[fd00::1]", "proxy.example.com."])).toEqual(["warden.lan", "10.0.0.5", "fd00::1", "proxy.example.com"]);
    expect(() => parseAllowedHosts("warden.lan")).toThrow(/http\.allowedHosts: must be a list/);
    expect(() => parseAllowedHosts(["warden.lan:8080"])).toThrow(/http\.allowedHosts\[0\]: must be a host name or IP address without a port/);
    expect(() => parseAllowedHosts(["ok", "a b"])).toThrow(/http\.allowedHosts\[1\]/);
    expect(() => parseAllowedHosts([7])).toThrow(/http\.allowedHosts\[0\]/);
    expect(() => parseAllowedHosts(["x".repeat(300)])).toThrow(/http\.allowedHosts\[0\]/);
    expect(() => parseAllowedHosts(Array.from({ length: maxAllowedHosts + 1 }, (_, i) => `h${String(i)}`))).toThrow(/at most 64/);
    expect(resolveCoordinatorConfig({ http: { allowedHosts: ["warden.lan"] } }).http.allowedHosts).toEqual(["warden.lan"]);
    expect(resolveCoordinatorConfig({}).http.allowedHosts).toEqual([]);
    expect(() => resolveCoordinatorConfig({ http: { allowedHosts: ["*"] } })).toThrow(/http\.allowedHosts\[0\]/);
  });

  it("reads the name of a Host header with or without a port; a malformed one reads as none", () => {
    expect(hostOfHeader("localhost:8080")).toBe("localhost");
    expect(hostOfHeader("[::1]:8080")).toBe("::1");
    expect(hostOfHeader("[::1]")).toBe("::1");
    expect(hostOfHeader("LOCALHOST.")).toBe("localhost");
    expect(hostOfHeader("127.0.0.1")).toBe("127.0.0.1");
    for (const bad of ["", ":80", "[::1", "a b", "localhost:80:80", "evil.example@localhost", "::1"]) expect(hostOfHeader(bad)).toBeUndefined();
  });

  it("accepts the loopback names, the listen host unless it is a wildcard, and the configured names", () => {
    expect([...acceptedHosts("127.0.0.1:8080", [])].sort()).toEqual(["127.0.0.1", "::1", "localhost"]);
    expect(acceptedHosts("10.0.0.5:8080", ["warden.lan"]).has("10.0.0.5")).toBe(true);
    expect(acceptedHosts("10.0.0.5:8080", ["warden.lan"]).has("warden.lan")).toBe(true);
    expect(acceptedHosts("0.0.0.0:8080", []).has("0.0.0.0")).toBe(false);
    expect(acceptedHosts("[::]:8080", []).has("::")).toBe(false);
  });
});
