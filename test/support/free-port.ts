/** A TCP port on 127.0.0.1 that was free a moment ago: the dev cluster's helper, one copy. */
export { freeLoopbackPort as freePort } from "../../services/cli/src/dev-cluster-nats.js";
