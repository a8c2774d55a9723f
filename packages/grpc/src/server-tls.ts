import { ServerCredentials } from "@grpc/grpc-js";
import type { SecureContextOptions } from "node:tls";
import type { TlsMaterial } from "./tls-material.js";

/** TLS 1.2 is the floor: grpc-js and node:http2 both negotiate 1.3 with each other. */
export const minTlsVersion = "TLSv1.2";

/** The secure-context part of a server's TLS (what a reload replaces). */
export function secureContextOptions(m: TlsMaterial): SecureContextOptions {
  return { cert: m.cert, key: m.key, ...(m.ca === undefined ? {} : { ca: m.ca }), minVersion: minTlsVersion };
}

/**
 * grpc-js server credentials whose certificate can be replaced while the
 * server listens: `update` hands the new secure context to the bound
 * http2 server (setSecureContext), so the listener stays up, connections
 * already open keep theirs and new handshakes use the new one. With a CA
 * (mTLS) a client must present a certificate that CA signed; one without a
 * certificate, or with another CA's, fails the handshake.
 */
export class ReloadableServerCredentials extends ServerCredentials {
  readonly mutual: boolean;

  constructor(material: TlsMaterial) {
    super({ requestCert: material.ca !== undefined, rejectUnauthorized: material.ca !== undefined }, secureContextOptions(material));
    this.mutual = material.ca !== undefined;
  }

  /** New handshakes use `material`; it must keep the same mutual-TLS setting (a CA, or none). */
  update(material: TlsMaterial): void {
    if ((material.ca !== undefined) !== this.mutual) throw new Error("a reload cannot turn mutual TLS on or off; restart to change tls.ca");
    this.updateSecureContextOptions(secureContextOptions(material));
  }

  _equals(other: ServerCredentials): boolean {
    return other === this;
  }
}
