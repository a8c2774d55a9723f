/**
 * The dashboard's page and style sheet. Static: everything live comes from
 * the JSON endpoints and the event stream, rendered by the bundled client
 * (/dashboard/app.js). Nothing is loaded from elsewhere, which the Content
 * Security Policy below also enforces.
 */
import { createHash } from "node:crypto";

/**
 * The page's only inline script: it loads /dashboard/app.js and, when that
 * load fails (refused, cut, or answered with an error), says so and tries
 * again after 0.5, 1, 2, 4, then every 5 s. A page whose script never ran
 * has nothing else that could recover it — and its HTML may well come from
 * a listener that is going away (an HA standby giving its port to a new
 * leader, a coordinator restarting). The CSP allows exactly this script by
 * its hash. (The style sheet is not retried: a page without it still works.)
 */
export const dashboardBootScript = `(function () {
  var conn = document.getElementById("conn");
  function script(tries) {
    var s = document.createElement("script");
    s.src = "/dashboard/app.js";
    s.onerror = function () {
      s.remove();
      if (conn !== null) conn.textContent = "the page's script did not load; retrying";
      setTimeout(function () { script(tries + 1); }, Math.min(500 * Math.pow(2, tries), 5000));
    };
    document.body.appendChild(s);
  }
  script(0);
})();`;

const bootHash = createHash("sha256").update(dashboardBootScript).digest("base64");

export const dashboardCsp = `default-src 'none'; script-src 'self' 'sha256-${bootHash}'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`;

export const dashboardHtml = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Warden</title>
<link rel="icon" href="/favicon.ico">
<link rel="stylesheet" href="/dashboard/app.css">
</head>
<body>
<header>
  <h1>Warden</h1>
  <nav id="nav" class="nav" aria-label="pages"></nav>
  <span id="conn" class="conn" data-state="connecting">connecting…</span>
  <span id="who" class="who"></span>
  <span id="ha" class="ha" hidden></span>
  <form id="token-form" class="token-form" hidden>
    <input id="token" type="password" autocomplete="off" placeholder="bearer token" aria-label="bearer token">
    <button type="submit">Use token</button>
  </form>
</header>
<main>
<section id="page-nodes" class="page page-nodes" data-page="nodes" aria-label="Nodes">
  <section class="panel nodes-panel">
    <h2>Nodes</h2>
    <div id="legend" class="legend"></div>
    <div class="node-tools">
      <input id="node-filter" type="search" maxlength="128" autocomplete="off" placeholder="filter: node id or model" aria-label="filter nodes by id or model">
      <span id="node-groups" class="node-groups" role="group" aria-label="nodes by state"></span>
      <span class="pager"><button type="button" id="page-prev" aria-label="previous page">‹</button><span id="page-info" class="page-info"></span><button type="button" id="page-next" aria-label="next page">›</button></span>
    </div>
    <div id="nodes" class="nodes"><p class="muted">waiting for the first snapshot…</p></div>
  </section>
  <section class="panel side">
    <h2>Placement</h2>
    <form id="explain-form" class="explain-form">
      <select id="explain-model" aria-label="model"></select>
      <button type="submit">Explain</button>
      <button type="button" id="load-button" class="act" hidden>Load</button>
      <button type="button" id="unload-button" class="act" hidden>Unload</button>
    </form>
    <div id="explain" class="explain"></div>
    <div id="action-result" class="action-result" role="status"></div>
    <h2>Load jobs</h2>
    <ul id="load-jobs" class="load-jobs"></ul>
    <h2>Events</h2>
    <ol id="events" class="events"></ol>
  </section>
</section>
<section id="page-models" class="page panel" data-page="models" aria-label="Models" hidden>
  <h2>Models</h2>
  <div id="models-result" class="action-result" role="status"></div>
  <div id="models" class="table-wrap"><p class="muted">waiting for the first snapshot…</p></div>
</section>
<section id="page-events" class="page panel" data-page="events" aria-label="Events" hidden>
  <h2>Events</h2>
  <form id="events-filter" class="filters">
    <input id="ev-node" type="search" maxlength="128" autocomplete="off" placeholder="node id" aria-label="filter events by node id">
    <input id="ev-model" type="search" maxlength="128" autocomplete="off" placeholder="model" aria-label="filter events by model">
    <input id="ev-type" type="search" maxlength="64" autocomplete="off" placeholder="type (eviction. for all eviction.*)" aria-label="filter events by type">
    <button type="submit">Filter</button>
    <button type="button" id="ev-pause" aria-pressed="false">Pause live tail</button>
    <span id="history-count" class="muted"></span>
  </form>
  <div id="history-status" class="action-result" role="status"></div>
  <ol id="history" class="events history"></ol>
</section>
<section id="page-policy" class="page panel" data-page="policy" aria-label="Policy" hidden>
  <h2>Watchdog policy</h2>
  <div id="policy-result" class="action-result" role="status"></div>
  <div id="policy"><p class="muted">loading…</p></div>
</section>
<section id="page-playground" class="page panel" data-page="playground" aria-label="Playground" hidden>
  <h2>Playground</h2>
  <form id="pg-form" class="pg-form">
    <label for="pg-model">Model</label><select id="pg-model"></select>
    <label for="pg-mode">Call</label><select id="pg-mode"><option value="chat">chat completion</option><option value="completion">completion</option></select>
    <label for="pg-max">Max tokens</label><input id="pg-max" type="number" min="1" max="4096" value="64">
    <label for="pg-prompt">Prompt</label><textarea id="pg-prompt" rows="4" maxlength="32000">Say hello to the operator.</textarea>
    <span></span><span class="pg-buttons"><button type="submit" class="act">Send</button> <button type="button" id="pg-stop" disabled>Stop</button></span>
  </form>
  <dl class="pg-stats">
    <dt>Time to first token</dt><dd id="pg-ttft">–</dd>
    <dt>Tokens</dt><dd id="pg-tokens">–</dd>
    <dt>Rate</dt><dd id="pg-rate">–</dd>
    <dt>Total</dt><dd id="pg-total">–</dd>
  </dl>
  <div id="pg-error" class="action-result error" role="alert"></div>
  <div id="pg-output" class="pg-output" role="region" aria-live="polite" aria-label="model output"></div>
</section>
<section id="page-plots" class="page panel" data-page="plots" aria-label="Plots" hidden>
  <h2>Plots</h2>
  <p id="plots-info" class="muted"></p>
  <div id="plots" class="plots"></div>
</section>
</main>
<script>${dashboardBootScript}</script>
</body>
</html>
`;

export const dashboardCss = `
:root { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d1d1f; background: #f4f5f7; font-size: 14px; }
body { margin: 0; }
header { display: flex; align-items: center; gap: 1em; padding: 0.6em 1.2em; background: #20232a; color: #f4f5f7; }
header h1 { font-size: 1.2em; margin: 0; letter-spacing: 0.05em; }
.conn { font-size: 0.85em; padding: 0.15em 0.6em; border-radius: 1em; background: #555; }
.conn[data-state="live"] { background: #1b7a31; }
.conn[data-state="error"] { background: #c62828; }
.who { font-size: 0.85em; opacity: 0.8; }
.ha { font-size: 0.85em; padding: 0.15em 0.6em; border-radius: 1em; background: #3a3f4b; }
.ha[data-role="standby"] { background: #8a5a00; }
.ha[data-role="paused"] { background: #c62828; }
.token-form input { width: 18em; }
main { padding: 1em; transition: opacity 0.2s; }
.page-nodes { display: grid; grid-template-columns: minmax(0, 3fr) minmax(0, 2fr); gap: 1em; }
.page-nodes[hidden], .page[hidden] { display: none; }
body[data-conn="error"] main, body[data-conn="connecting"] main { opacity: 0.5; filter: grayscale(1); }
.nav { display: flex; gap: 0.2em; flex-wrap: wrap; }
.nav a { color: #d8dbe2; text-decoration: none; padding: 0.25em 0.7em; border-radius: 4px; }
.nav a:hover, .nav a:focus-visible { background: #3a3f4b; }
.nav a[aria-current="page"] { background: #f4f5f7; color: #20232a; font-weight: 600; }
.table-wrap { overflow-x: auto; }
table.grid { width: 100%; border-collapse: collapse; background: #fff; border-radius: 8px; font-size: 0.92em; }
table.grid th, table.grid td { text-align: left; padding: 0.4em 0.6em; border-bottom: 1px solid #eceef1; vertical-align: top; }
table.grid thead th { color: #555; font-weight: 600; }
table.grid td.num { font-variant-numeric: tabular-nums; white-space: nowrap; }
table.grid .detail { color: #b3261e; font-size: 0.85em; max-width: 28em; }
table.grid td.actions { white-space: nowrap; }
table.grid td.actions > * { margin-right: 0.3em; }
.state { display: inline-block; padding: 0.05em 0.55em; border-radius: 1em; background: #e6e8eb; color: #1d1d1f; white-space: nowrap; }
.state[data-state="ready"] { background: #d7f0dc; color: #14532d; }
.state[data-state="busy"] { background: #d6e6fb; color: #0b3d91; }
.state[data-state="loading"] { background: #fbefc5; color: #5c4400; }
.state[data-state="blocked"] { background: #fbd9d6; color: #7f1d1d; }
.scale-form { display: inline-flex; align-items: center; gap: 0.2em; }
.scale-form input.bound { width: 3.5em; }
.filters { display: flex; flex-wrap: wrap; gap: 0.4em; align-items: center; margin-bottom: 0.6em; }
.events.history { max-height: none; }
.policy-form { background: #fff; border-radius: 8px; padding: 0.8em 1em; display: grid; grid-template-columns: max-content max-content 1fr; gap: 0.5em 1em; align-items: center; }
.policy-form .policy-row { display: contents; }
.policy-form .help { color: #555; font-size: 0.88em; }
.policy-form input[type="checkbox"] { justify-self: start; margin-left: 0; }
.policy-form > p, .policy-form > button { grid-column: 1 / -1; justify-self: start; margin: 0; }
.policy-models { background: #fff; border-radius: 8px; padding: 0.6em 1em 0.6em 2em; }
#sweep-plot { background: #fff; border-radius: 8px; display: block; margin: 0.6em 0; max-width: 100%; height: auto; }
.sweep-table { background: #fff; border-radius: 8px; border-collapse: collapse; }
.sweep-table th, .sweep-table td { padding: 0.3em 0.6em; text-align: left; border-bottom: 1px solid #eee; }
.pg-form { display: grid; grid-template-columns: max-content minmax(0, 40em); gap: 0.5em 1em; align-items: center; }
.pg-form textarea { font: inherit; width: 100%; box-sizing: border-box; }
.pg-stats { display: grid; grid-template-columns: repeat(4, max-content max-content); gap: 0.3em 0.8em; margin: 1em 0; }
.pg-stats dt { color: #555; }
.pg-stats dd { margin: 0; font-variant-numeric: tabular-nums; font-weight: 600; }
.pg-output { background: #fff; border-radius: 8px; padding: 0.8em 1em; min-height: 4em; white-space: pre-wrap; max-height: 50vh; overflow-y: auto; }
.panel h2 { font-size: 1em; margin: 0.2em 0 0.6em; text-transform: uppercase; letter-spacing: 0.06em; color: #555; }
.nodes { display: flex; flex-direction: column; gap: 1em; }
.node { background: #fff; border-radius: 8px; padding: 0.8em 1em; box-shadow: 0 1px 2px rgba(0,0,0,0.08); content-visibility: auto; contain-intrinsic-size: auto 24em; }
.node-head { display: flex; align-items: baseline; gap: 0.8em; }
.node-head h3 { margin: 0; font-size: 1.05em; }
.node-status { color: #666; font-size: 0.9em; flex: 1; }
.bar { position: relative; height: 14px; background: #e6e8eb; border-radius: 7px; overflow: hidden; margin: 0.35em 0 0.1em; }
.bar .measured { position: absolute; left: 0; top: 0; bottom: 0; background: #7aa7e0; }
.bar .accounted { position: absolute; left: 0; top: 4px; height: 6px; background: #20232a; opacity: 0.75; }
.bar-label { font-size: 0.8em; color: #555; }
.drift-high { color: #c62828; font-weight: 600; }
table.instances { width: 100%; border-collapse: collapse; margin-top: 0.6em; font-size: 0.92em; }
table.instances th { text-align: left; font-weight: 600; color: #666; border-bottom: 1px solid #e6e8eb; padding: 0.2em 0.4em; }
table.instances td { padding: 0.25em 0.4em; border-bottom: 1px solid #f0f1f3; vertical-align: top; }
table.instances td.detail { color: #666; font-size: 0.9em; word-break: break-all; }
.badge { display: inline-block; padding: 0.05em 0.55em; border-radius: 1em; color: #fff; font-size: 0.85em; white-space: nowrap; }
.node-tools { display: flex; flex-wrap: wrap; align-items: center; gap: 0.6em; margin-bottom: 0.8em; }
.node-tools input { width: 16em; }
.node-groups { display: flex; gap: 0.3em; flex-wrap: wrap; }
.node-groups button { border: 1px solid #c9ccd1; background: #fff; border-radius: 1em; padding: 0.1em 0.7em; font-size: 0.85em; }
.node-groups button[aria-pressed="true"] { background: #20232a; color: #fff; border-color: #20232a; }
.pager { display: flex; align-items: center; gap: 0.4em; margin-left: auto; font-size: 0.9em; color: #555; }
.more-rows { color: #666; font-size: 0.85em; margin: 0.3em 0 0; }
.legend { display: flex; flex-wrap: wrap; gap: 0.4em; margin-bottom: 0.6em; }
.muted { color: #666; }
.side { display: flex; flex-direction: column; }
.explain-form { display: flex; gap: 0.4em; flex-wrap: wrap; }
.explain { background: #fff; border-radius: 8px; padding: 0.4em 0.8em; margin: 0.6em 0; min-height: 1.5em; font-size: 0.92em; }
.explain ul { margin: 0.3em 0; padding-left: 1.2em; }
.explain .explain-at { color: #666; font-size: 0.85em; margin: 0.2em 0 0; }
.action-result { font-size: 0.9em; min-height: 1.2em; margin-bottom: 0.6em; }
.action-result.error { color: #c62828; }
.events { list-style: none; margin: 0; padding: 0; background: #fff; border-radius: 8px; max-height: 60vh; overflow-y: auto; font-size: 0.88em; }
.events li { padding: 0.3em 0.8em; border-bottom: 1px solid #f0f1f3; border-left: 4px solid #9e9e9e; }
.events li[data-tone="ok"] { border-left-color: #2e9e44; }
.events li[data-tone="warn"] { border-left-color: #e0701b; }
.events li[data-tone="error"] { border-left-color: #c62828; }
.events time { color: #666; margin-right: 0.6em; font-variant-numeric: tabular-nums; }
.logs-row td { background: #f7f8fa; }
.log-block pre { background: #fff; border: 1px solid #e6e8eb; border-radius: 4px; padding: 0.4em 0.6em; max-height: 16em; overflow: auto; white-space: pre-wrap; word-break: break-all; font-size: 0.85em; margin: 0.2em 0 0.5em; }
.plots { display: grid; grid-template-columns: repeat(auto-fill, minmax(26em, 1fr)); gap: 1em; }
.plot { background: #fff; border-radius: 8px; padding: 0.6em 0.8em; margin: 0; }
.plot figcaption { font-weight: 600; font-size: 0.92em; }
.plot svg { width: 100%; height: 9em; display: block; }
.plot .axis { stroke: #c9ccd1; stroke-width: 1; }
.plot .tick { fill: #555; font-size: 10px; }
.plot-legend { display: flex; flex-wrap: wrap; gap: 0.2em 0.8em; font-size: 0.82em; color: #444; list-style: none; margin: 0.2em 0 0; padding: 0; }
.plot-legend li::before { content: ""; display: inline-block; width: 0.8em; height: 0.25em; margin-right: 0.3em; vertical-align: middle; background: var(--c); }
button { cursor: pointer; }
button.act { background: #20232a; color: #fff; border: 0; border-radius: 4px; padding: 0.2em 0.7em; }
button.act.small { font-size: 0.8em; padding: 0.1em 0.5em; }
@media (max-width: 900px) {
  .page-nodes { grid-template-columns: 1fr; }
  header { flex-wrap: wrap; }
  .policy-form { grid-template-columns: 1fr; }
  .policy-form .help { margin-top: -0.4em; }
  .pg-form { grid-template-columns: 1fr; }
  .pg-stats { grid-template-columns: max-content max-content; }
  /* Narrow: each model a card, each cell a labelled line. */
  table.grid thead { position: absolute; width: 1px; height: 1px; overflow: hidden; clip-path: inset(50%); }
  table.grid tr { display: block; border-bottom: 1px solid #dfe2e6; padding: 0.4em 0; }
  table.grid th[scope="row"], table.grid td { display: flex; flex-wrap: wrap; align-items: flex-start; gap: 0.3em 0.6em; border: 0; padding: 0.15em 0.6em; }
  table.grid td .detail { flex-basis: 100%; }
  table.grid td::before { content: attr(data-label); color: #555; min-width: 9em; }
  table.grid td.actions { flex-wrap: wrap; white-space: normal; }
}
`;
