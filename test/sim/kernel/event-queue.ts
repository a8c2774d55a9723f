// The queue moved to @warden/whatif (the policy what-if replay runs on it too).
export { EventQueue } from "@warden/whatif";
