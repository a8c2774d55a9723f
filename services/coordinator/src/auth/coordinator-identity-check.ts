import { X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import type { Logger } from "@warden/common";
import { identityOfCertificate, type TlsFiles } from "@warden/grpc";

/**
 * Under mutual TLS agents obey only a caller whose certificate carries the
 * coordinator identity (URI SAN `urn:warden:coordinator`). A coordinator
 * certificate made before `warden certs` added it still serves and verifies,
 * so nothing fails until the first load; this says why at start, and how to
 * fix it, instead. Only the leaf (first certificate of the file) is read;
 * the file was already checked whole by readTlsMaterial.
 */
export function warnWithoutCoordinatorIdentity(tls: TlsFiles | undefined, log: Logger): void {
  if (tls?.caFile === undefined) return;
  let isCoordinator: boolean;
  try {
    isCoordinator = identityOfCertificate(new X509Certificate(readFileSync(tls.certFile)).toLegacyObject()).isCoordinator;
  } catch {
    return;
  }
  if (isCoordinator) return;
  log.warn("tls.cert lacks the coordinator identity (URI SAN urn:warden:coordinator): agents under mutual TLS will refuse every command from this coordinator. Issue a new certificate with `warden certs issue coordinator <name> --out <certs dir> --san <host>` and restart with it", { cert: tls.certFile });
}
