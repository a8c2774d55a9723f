/**
 * Generated malformed HTTP requests for the coordinator's HTTP listener
 * (fast-check arbitraries), each with the answer it must get: a 4xx for a
 * request that is malformed (bad JSON, wrong types, over-size, a content type
 * no route reads, a truncated or mismatched multipart body, a method or path
 * no route has, a broken header), below 500 for a well-formed read with odd
 * headers or query. No case is a valid command: whatever a fuzz run sends,
 * nothing in the cluster may change.
 */
import fc from "fast-check";
import type { RawHttpRequest } from "./raw-http.js";

export type HttpFuzzKind = "bad-json" | "wrong-type" | "over-size" | "content-type" | "multipart" | "method" | "path" | "header" | "read";

export interface HttpFuzzCase {
  readonly kind: HttpFuzzKind;
  readonly request: RawHttpRequest;
  /** 4xx: a client error; "below-500": a read that may well succeed. */
  readonly expect: "4xx" | "below-500";
}

/** The listener's `http.bodyLimit` in the fuzzed coordinator's config. */
export const fuzzBodyLimitBytes = 16 * 1024;
const actionBodyLimitBytes = 4096;

const jsonRoutes = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/audio/speech", "/v1/images/generations"] as const;
const actions = ["load", "unload", "drain", "undrain", "reboot"] as const;
const readRoutes = ["/v1/models", "/", "/dashboard/app.css", "/dashboard/app.js", "/api/dashboard/whoami", "/api/dashboard/snapshot", "/api/dashboard/nodes", "/api/dashboard/models", "/api/dashboard/explain?model=m", "/api/dashboard/stream", "/api/dashboard/ha", "/ha/leader"] as const;
const everyPath = [...jsonRoutes, ...actions.map((a) => `/api/dashboard/actions/${a}`), "/v1/audio/transcriptions", ...readRoutes];

/** The field each POST route needs as a string (the model, or the node of drain/undrain). */
const idFieldOf = (path: string): string => (path.endsWith("/drain") || path.endsWith("/undrain") ? "nodeId" : "model");

const postPath = fc.oneof(fc.constantFrom(...jsonRoutes), fc.constantFrom(...actions).map((a) => `/api/dashboard/actions/${a}`));
const nonString = fc.oneof(fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true }), fc.boolean(), fc.constant(null), fc.array(fc.jsonValue(), { maxLength: 4 }), fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue(), { maxKeys: 4 }));
const hostile = fc.oneof(fc.string({ maxLength: 64 }), fc.constantFrom("__proto__", "constructor", "\u0000", "\ud800", "../../etc/passwd", "%00", "m".repeat(300), "<script>", "m\r\nx: y"));

const isJsonObject = (s: string): boolean => {
  try {
    const v: unknown = JSON.parse(s);
    return typeof v === "object" && v !== null && !Array.isArray(v);
  } catch {
    return false;
  }
};

const jsonPost = (path: string, body: string | Buffer, contentType = "application/json"): RawHttpRequest => ({ method: "POST", path, headers: { "content-type": contentType }, body });

/** Not JSON at all, JSON of another type, or a JSON object cut short. */
const badJson: fc.Arbitrary<HttpFuzzCase> = fc
  .tuple(
    postPath,
    fc.oneof(
      fc.string({ maxLength: 200 }),
      fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)),
      fc.tuple(fc.dictionary(fc.string({ maxLength: 12 }), fc.jsonValue({ maxDepth: 2 }), { minKeys: 1, maxKeys: 6 }), fc.nat()).map(([o, cut]) => {
        const s = JSON.stringify(o);
        return s.slice(0, cut % s.length);
      }),
      fc.constantFrom("", "{", "{]", "[{}]", '{"model":}', "{'model':'m'}", "\ufeff{}", "{\"a\":1}}", "NaN", "\u0000"),
    ),
  )
  .filter(([, body]) => !isJsonObject(body))
  .map(([path, body]) => ({ kind: "bad-json", request: jsonPost(path, body), expect: "4xx" }));

/** A JSON object whose required id is not a string (hostile extra fields around it), or a chat whose messages are not a list. */
const wrongType: fc.Arbitrary<HttpFuzzCase> = fc.oneof(
  fc.tuple(postPath, fc.dictionary(hostile, fc.jsonValue({ maxDepth: 2 }), { maxKeys: 5 }), nonString).map(([path, extra, bad]): HttpFuzzCase => ({ kind: "wrong-type", request: jsonPost(path, JSON.stringify({ ...extra, [idFieldOf(path)]: bad })), expect: "4xx" })),
  // null is "not given" to these schemas (an empty prompt is valid): the wrong types here are numbers, booleans and objects.
  fc.tuple(fc.constantFrom("/v1/chat/completions", "/v1/completions"), fc.oneof(fc.integer(), fc.boolean(), fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue(), { minKeys: 1, maxKeys: 3 }), fc.array(fc.oneof(fc.integer(), fc.boolean()), { minLength: 1, maxLength: 3 }))).map(([path, v]): HttpFuzzCase => ({ kind: "wrong-type", request: jsonPost(path, JSON.stringify(path.endsWith("/chat/completions") ? { model: "m", messages: v } : { model: "m", prompt: v })), expect: "4xx" })),
  fc.tuple(fc.constantFrom(...actions), hostile).map(([a, id]): HttpFuzzCase => ({ kind: "wrong-type", request: jsonPost(`/api/dashboard/actions/${a}`, JSON.stringify({ model: id, nodeId: id, force: "yes" })), expect: "4xx" })),
);

/** A body past the route's limit (http.bodyLimit, or the actions' 4 KiB), declared as sent. */
const overSize: fc.Arbitrary<HttpFuzzCase> = fc.tuple(postPath, fc.integer({ min: 1, max: 8 * 1024 }), fc.boolean()).map(([path, extra, asJson]) => {
  const limit = path.startsWith("/api/") ? actionBodyLimitBytes : fuzzBodyLimitBytes;
  const pad = "x".repeat(limit + extra);
  return { kind: "over-size", request: jsonPost(path, asJson ? JSON.stringify({ model: "m", input: pad, prompt: pad }) : pad), expect: "4xx" };
});

const contentTypes = ["application/x-www-form-urlencoded", "text/xml", "application/xml", "application/octet-stream", "image/png", "application/json5", "text/html", "x/y", "application", ";", "application/json; charset=ebcdic", "text/plain", "multipart/form-data", "multipart/mixed; boundary=a"];

/** A content type no route reads (or not JSON inside), on every POST route, the upload included. */
const contentType: fc.Arbitrary<HttpFuzzCase> = fc
  .tuple(fc.oneof(postPath, fc.constant("/v1/audio/transcriptions")), fc.oneof(fc.constantFrom(...contentTypes), fc.stringMatching(/^[a-z]{1,8}\/[a-z0-9.+-]{1,12}$/)), fc.oneof(fc.string({ maxLength: 100 }), fc.constantFrom("model=m&nodeId=local", "<a/>", '{"nodeId":"local"')))
  // JSON (any charset) is the bad-json generator's; here it would be a valid body.
  .filter(([, ct]) => !/json(;|$)/.test(ct) || ct.includes("ebcdic"))
  .map(([path, ct, body]) => ({ kind: "content-type", request: jsonPost(path, body, ct), expect: "4xx" }));

const crlf = "\r\n";
/** A whole transcription upload (model m, a short file), for the multipart generator to break. */
function upload(boundary: string, file: string, fields: Readonly<Record<string, string>>): string {
  const parts = Object.entries(fields).map(([k, v]) => `--${boundary}${crlf}Content-Disposition: form-data; name="${k}"${crlf}${crlf}${v}${crlf}`);
  return `${parts.join("")}--${boundary}${crlf}Content-Disposition: form-data; name="file"; filename="a.wav"${crlf}Content-Type: audio/wav${crlf}${crlf}${file}${crlf}--${boundary}--${crlf}`;
}

/** Uploads cut before their closing boundary, with a boundary the body does not use, without one, or with broken part headers. */
const multipart: fc.Arbitrary<HttpFuzzCase> = fc
  .tuple(fc.stringMatching(/^[A-Za-z0-9'()+_,./:=?-]{1,40}$/), fc.string({ maxLength: 200 }), fc.nat(), fc.constantFrom("cut", "other-boundary", "no-boundary", "bad-headers", "no-file"), fc.dictionary(fc.constantFrom("model", "language", "response_format", "__proto__", "temperature"), fc.string({ maxLength: 16 }), { maxKeys: 3 }))
  .map(([boundary, file, cut, how, fields]) => {
    const whole = upload(boundary, file, { model: "m", ...fields });
    const close = whole.lastIndexOf(`--${boundary}--`);
    let body = whole;
    let ct = `multipart/form-data; boundary=${boundary}`;
    if (how === "cut") body = whole.slice(0, cut % close);
    else if (how === "other-boundary") ct = `multipart/form-data; boundary=${boundary}Z`;
    else if (how === "no-boundary") ct = "multipart/form-data";
    else if (how === "bad-headers") body = whole.replaceAll("Content-Disposition: form-data;", "Content-Disposition form-data").slice(0, close);
    else body = `--${boundary}${crlf}Content-Disposition: form-data; name="model"${crlf}${crlf}m${crlf}--${boundary}--${crlf}`;
    return { kind: "multipart", request: { method: "POST", path: "/v1/audio/transcriptions", headers: { "content-type": ct }, body }, expect: "4xx" };
  });

/** A method no route has on that path (HEAD of a GET route is served, so not here). */
const method: fc.Arbitrary<HttpFuzzCase> = fc
  .tuple(fc.constantFrom("PUT", "DELETE", "PATCH", "OPTIONS", "PROPFIND", "FOO", "MKCOL", "LINK", "POST", "GET"), fc.constantFrom(...everyPath), fc.string({ maxLength: 40 }))
  .filter(([m, p]) => (m === "POST" ? (readRoutes as readonly string[]).includes(p) : m === "GET" ? !(readRoutes as readonly string[]).includes(p) : true))
  .map(([m, path, body]) => ({ kind: "method", request: { method: m, path, headers: { "content-type": "application/json" }, body }, expect: "4xx" }));

/** Paths no route has: bad percent-encoding, dot segments, doubled slashes, NULs, long ones; and reads given query keys they do not take. */
const segment = fc.oneof(fc.constantFrom("..", ".", "", "%zz", "%", "%00", "%2e%2e", "%2F", "v1", "api", "dashboard", "actions", "%ff%fe", "~", "*", "a".repeat(2000)), fc.string({ maxLength: 12 }).map((s) => encodeURIComponent(s)));
const path: fc.Arbitrary<HttpFuzzCase> = fc.oneof(
  fc.tuple(fc.constantFrom("GET", "POST", "HEAD"), fc.array(segment, { minLength: 1, maxLength: 6 })).map(([m, segs]) => {
    const p = `/${segs.join("/")}`;
    return { m, p: (everyPath as readonly string[]).includes(p) || p === "/" ? `${p}/%zz` : p };
  }).map(({ m, p }): HttpFuzzCase => ({ kind: "path", request: { method: m, path: p, ...(m === "POST" ? { headers: { "content-type": "application/json" }, body: "{}" } : {}) }, expect: "4xx" })),
  fc.tuple(fc.constantFrom("/api/dashboard/whoami", "/api/dashboard/snapshot", "/api/dashboard/stream", "/api/dashboard/explain"), fc.constantFrom("?x=1", "?model=m&model=n", "?model[]=m", "?model=%zz", "?model=", "?model=..%2f", `?model=${"m".repeat(500)}`, "?__proto__=1", "?model=m&x")).map(([p, q]): HttpFuzzCase => ({ kind: "path", request: { method: "GET", path: `${p}${q}` }, expect: "4xx" })),
);

/** Broken framing and header lines the server must refuse itself (400, 421, 431), on reads and on a malformed POST. */
const brokenHeader: fc.Arbitrary<HttpFuzzCase> = fc
  .tuple(
    fc.constantFrom(...readRoutes),
    fc.constantFrom<Readonly<Record<string, string | null>>>(
      { "content-length": "abc" },
      { "content-length": "-1" },
      { "content-length": "1, 2" },
      { "transfer-encoding": "chunked", "x-body": "zz" },
      { "transfer-encoding": "gzip, chunked, x" },
      { host: null },
      { host: "" },
      { host: "evil.example" },
      { host: "localhost.evil.example:1" },
      { host: "[::1" },
      { "bad header": "x" },
      { "x-big": "a".repeat(20_000) },
      { "x-\u0001": "1" },
    ),
  )
  .map(([p, headers]): HttpFuzzCase => {
    const chunkedGarbage = headers["x-body"] === "zz";
    return { kind: "header", request: { method: chunkedGarbage ? "POST" : "GET", path: p, headers, ...(chunkedGarbage ? { body: "zz\r\nabc\r\n0\r\n\r\n", contentLength: null } : {}) }, expect: "4xx" };
  });

/** Well-formed reads with odd but legal headers: served or refused, never a server error. */
const oddRead: fc.Arbitrary<HttpFuzzCase> = fc
  .tuple(
    fc.constantFrom(...readRoutes),
    fc.constantFrom("GET", "HEAD"),
    fc.dictionary(
      fc.constantFrom("accept", "accept-encoding", "accept-language", "authorization", "cookie", "origin", "referer", "x-forwarded-for", "x-forwarded-host", "range", "if-none-match", "content-type", "user-agent", "expect", "connection"),
      fc.oneof(fc.stringMatching(/^[\x21-\x7e][\x20-\x7e]{0,200}$/), fc.constantFrom("text/event-stream", "gzip, br, zstd", "Bearer x", "bytes=0-1", "*", "100-continue", "keep-alive, Upgrade", "null", "https://evil.example")),
      { maxKeys: 4 },
    ),
    fc.constantFrom("localhost", "127.0.0.1", "[::1]", "LOCALHOST", "localhost."),
  )
  .map(([p, m, headers, hostName]): HttpFuzzCase => ({ kind: "read", request: { method: m, path: p, headers: { ...headers, connection: "close", host: hostName } }, expect: "below-500" }));

/** Every kind, in proportion to what it explores (over-size bodies are the costly ones). */
export function httpFuzzCase(): fc.Arbitrary<HttpFuzzCase> {
  return fc.oneof(
    { arbitrary: badJson, weight: 4 },
    { arbitrary: wrongType, weight: 4 },
    { arbitrary: overSize, weight: 1 },
    { arbitrary: contentType, weight: 3 },
    { arbitrary: multipart, weight: 3 },
    { arbitrary: method, weight: 2 },
    { arbitrary: path, weight: 3 },
    { arbitrary: brokenHeader, weight: 2 },
    { arbitrary: oddRead, weight: 2 },
  );
}
