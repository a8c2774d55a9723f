export { PlacementView } from "@warden/cluster";
