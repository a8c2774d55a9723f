import { Code } from "@warden/common";

/**
 * The HTTP status of a Warden error code, shared by the OpenAI routes and the
 * dashboard. They differ in one place: FAILED_PRECONDITION is a state the
 * caller cannot fix on an inference path (cannot place, load-failure cooldown,
 * model being stopped: 503), and a conflict with the current state on an
 * operator's action (draining a drained node, 409).
 */
export function httpStatusOfCode(code: Code, failedPrecondition: 409 | 503): number {
  switch (code) {
    case Code.InvalidArgument:
    case Code.OutOfRange:
      return 400;
    case Code.Unauthenticated:
      return 401;
    case Code.PermissionDenied:
      return 403;
    case Code.NotFound:
      return 404;
    case Code.AlreadyExists:
    case Code.Aborted:
      return 409;
    case Code.FailedPrecondition:
      return failedPrecondition;
    case Code.ResourceExhausted:
      return 429;
    case Code.Canceled:
      // nginx's "client closed request": only ever logged, the client is gone.
      return 499;
    case Code.Unimplemented:
      return 501;
    case Code.Unavailable:
      return 503;
    case Code.DeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}
