#include "supervisor/serve/console_static.h"

namespace pillbox::serve {

const std::string_view kConsoleCss = R"css(
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d2330; background: #f6f7f9; }
header { display: flex; align-items: center; gap: 24px; padding: 8px 20px; background: #1d2330; color: #fff; }
header .brand { font-weight: 700; letter-spacing: .04em; }
header nav a { color: #c9d1e0; margin-right: 16px; text-decoration: none; }
header nav a.active, header nav a:hover { color: #fff; border-bottom: 2px solid #e0a030; }
header .where { margin-left: auto; color: #c9d1e0; font-family: monospace; font-size: 12px; }
main { padding: 12px 20px 40px; }
h1 { font-size: 20px; margin: 8px 0 12px; }
h2 { font-size: 16px; margin: 20px 0 6px; }
table { border-collapse: collapse; background: #fff; width: 100%; }
th, td { border-bottom: 1px solid #e3e6eb; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #eef0f4; font-weight: 600; }
td.num { text-align: right; }
td.key, span.key, td.message, span.message { word-break: break-all; }
a.fp, code { font-family: ui-monospace, monospace; font-size: 13px; }
a.fp { white-space: nowrap; }
.status { padding: 1px 6px; border-radius: 3px; font-size: 12px; }
.status.quarantined, .status.failed-again { background: #fde2e1; color: #8a1c17; }
.status.resolved { background: #dcf3e0; color: #1c6b2c; }
.status.discarded { background: #e8e8e8; color: #555; }
.status.allowed { background: #dde8fb; color: #1d3f8a; }
.status.replaying { background: #fff1c9; color: #7a5a00; }
form.filters, form.action { display: flex; flex-wrap: wrap; gap: 10px; align-items: center; margin-bottom: 12px; }
dl.record { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; background: #fff; padding: 10px; }
dl.record dt { font-weight: 600; }
dl.record dd { margin: 0; word-break: break-all; }
pre { background: #fff; border: 1px solid #e3e6eb; padding: 8px; overflow: auto; max-height: 360px;
      white-space: pre-wrap; word-break: break-all; }
.note { color: #5a6475; font-size: 12px; }
.error { color: #8a1c17; }
)css";

const std::string_view kConsoleJs = R"js('use strict';
// pillbox console: the forms of a page post their action as JSON with the
// access token, asked for once per tab and kept in sessionStorage; answers
// are shown as text, never as markup.

// Posts `body` to `url` with the token typed in `tokenInput` (and keeps it
// for the tab); `taken(answer)` when the console took it, else "STATUS:
// error" in `result`.
function pillboxAction(url, tokenInput, body, result, taken) {
  const token = tokenInput ? tokenInput.value.trim() : '';
  window.sessionStorage.setItem('pillbox-token', token);
  return fetch(url, {
    method: 'POST',
    headers: { 'Authorization': 'Bearer ' + token, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  }).then(function (response) {
    return response.json().catch(function () { return {}; }).then(function (answer) {
      if (response.ok) {
        taken(answer);
      } else {
        result.textContent = response.status + ': ' + (answer.error || response.statusText);
      }
    });
  }).catch(function (error) { result.textContent = String(error); });
}
// Every token field of the page starts with the tab's token.
(function () {
  const saved = window.sessionStorage.getItem('pillbox-token');
  if (!saved) return;
  document.querySelectorAll('#token, #patch-token, #allow-token, .job-token').forEach(function (input) {
    input.value = saved;
  });
})();
// The discard form: a reason.
(function () {
  const form = document.getElementById('discard-form');
  if (!form) return;
  const result = document.getElementById('discard-result');
  form.addEventListener('submit', function (event) {
    event.preventDefault();
    result.textContent = 'discarding…';
    pillboxAction(form.dataset.action, document.getElementById('token'), { reason: form.elements.reason.value }, result,
                  function () {
                    result.textContent = 'discarded';
                    window.location.reload();
                  });
  });
})();
// The allow form: allowed to replay, or that revoked; a note.
(function () {
  const form = document.getElementById('allow-form');
  if (!form) return;
  const result = document.getElementById('allow-result');
  const revoke = form.dataset.revoke === 'true';
  form.addEventListener('submit', function (event) {
    event.preventDefault();
    result.textContent = revoke ? 'revoking…' : 'allowing…';
    pillboxAction(form.dataset.action, document.getElementById('allow-token'),
                  { note: form.elements.note.value, revoke: revoke }, result, function () {
                    result.textContent = revoke ? 'revoked' : 'allowed';
                    window.location.reload();
                  });
  });
})();
// The patch form: a note, and a new payload (a file, sent as base64) or
// handler arguments (K=V lines).
(function () {
  const form = document.getElementById('patch-form');
  if (!form) return;
  const result = document.getElementById('patch-result');
  // The file's bytes as base64 (the data URL's part after the comma).
  function readBase64(file) {
    return new Promise(function (resolve, reject) {
      const reader = new FileReader();
      reader.onload = function () { resolve(String(reader.result).replace(/^[^,]*,/, '')); };
      reader.onerror = function () { reject(reader.error); };
      reader.readAsDataURL(file);
    });
  }
  form.addEventListener('submit', function (event) {
    event.preventDefault();
    const body = { note: form.elements.note.value };
    const file = form.elements.payload.files[0];
    const lines = form.elements.set_args ? form.elements.set_args.value.split('\n') : [];
    const args = {};
    let hasArgs = false;
    for (const line of lines) {
      if (line.trim() === '') continue;
      const eq = line.indexOf('=');
      if (eq <= 0) { result.textContent = 'arguments are K=V lines: ' + line; return; }
      args[line.slice(0, eq)] = line.slice(eq + 1);
      hasArgs = true;
    }
    if (hasArgs) body.set_args = args;
    result.textContent = 'patching…';
    (file ? readBase64(file) : Promise.resolve(null)).then(function (b64) {
      if (b64 !== null) body.payload_b64 = b64;
      return pillboxAction(form.dataset.action, document.getElementById('patch-token'), body, result, function (answer) {
        result.textContent = 'revision ' + answer.n + ' stored: ' + answer.summary;
      });
    }).catch(function (error) { result.textContent = String(error); });
  });
})();
// The runs page: its table rebuilt from /api/runs every 2 s, every value as
// text (never markup); the same columns as runs_page (console_pages.cpp).
(function () {
  const table = document.getElementById('live-runs');
  if (!table) return;
  const empty = document.getElementById('live-runs-empty');
  const body = table.tBodies[0];
  function cell(row, value, numeric) {
    const td = row.insertCell();
    td.textContent = value === undefined || value === null ? '-' : String(value);
    if (numeric) td.className = 'num';
  }
  function render(runs) {
    body.replaceChildren();
    runs.forEach(function (r) {
      const row = body.insertRow();
      cell(row, r.run_id, true);
      cell(row, r.pid, true);
      cell(row, r.started_at);
      cell(row, r.updated_at);
      cell(row, r.tasks_total, true);
      cell(row, (r.tasks || []).map(function (t) { return t.kind + ' ' + t.verdict + ': ' + t.count; }).join(', '));
      cell(row, Object.keys(r.attempts || {}).map(function (k) { return k + ': ' + r.attempts[k]; }).join(', '));
      const slots = r.slots || {};
      cell(row, slots.busy + ' / ' + slots.total, true);
      cell(row, r.breaker);
      cell(row, typeof r.tasks_per_second === 'number' ? r.tasks_per_second.toFixed(1) : '-', true);
    });
    empty.hidden = runs.length !== 0;
  }
  function refresh() {
    fetch(table.dataset.source, { cache: 'no-store' })
      .then(function (response) { return response.json(); })
      .then(function (answer) { if (Array.isArray(answer.runs)) render(answer.runs); })
      .catch(function () { /* the next refresh tries again */ });
  }
  window.setInterval(refresh, 2000);
})();
)js";

}  // namespace pillbox::serve
