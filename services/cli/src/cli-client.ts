import type { DescService } from "@bufbuild/protobuf";
import { createH2Client, createLeaderFollowingClient, type H2ClientOptions, type LeaderFollowingClient } from "@warden/grpc";
import { parseAddrList } from "./addr.js";
import type { GlobalOpts } from "./action-context.js";

/**
 * The CLI's client for `svc` at `--addr` / WARDEN_ADDR: one address, or up
 * to 8 comma-separated HA coordinators. Calls follow the leader
 * (createLeaderFollowingClient): a standby's refusal names the leader and the
 * call goes there if it is listed; an address nobody listens on is skipped;
 * a call cut mid-flight is re-sent only when it is a read, so `warden predict`
 * or `warden models load` never runs twice. A member that answers nothing
 * (SIGSTOPped, wedged) costs each attempt at most 2 s (answerWithinMs): a
 * read moves on; a write not yet sent to it moves on, one already sent fails
 * UNAVAILABLE (exit 3) saying it did not answer. Each address gets the lean
 * HTTP/2 client with `transport` (TLS, bearer header).
 */
export function cliClient<T extends DescService>(svc: T, g: GlobalOpts, transport: H2ClientOptions = {}): LeaderFollowingClient<T> {
  return createLeaderFollowingClient(svc, parseAddrList(g.addr, "--addr"), { connect: (address) => createH2Client(svc, address, transport) });
}
