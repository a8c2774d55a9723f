// The clock moved to @warden/whatif (the policy what-if replay runs on it too).
export { VirtualClock } from "@warden/whatif";
