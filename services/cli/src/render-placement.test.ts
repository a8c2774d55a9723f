import { describe, expect, it } from "vitest";
import { Placement } from "@warden/proto";
import { placementName } from "./render.js";

describe("placementName", () => {
  it("uses the words models ls --help explains", () => {
    expect([Placement.UNSPECIFIED, Placement.LOCAL, Placement.LOCAL_REMOTE, Placement.REMOTE_ONLY].map(placementName)).toEqual(["-", "local", "local+remote", "remote-only"]);
  });
});
