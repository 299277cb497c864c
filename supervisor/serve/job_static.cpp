#include "supervisor/serve/job_static.h"

namespace pillbox::serve {

const std::string_view kJobsCss = R"css(
.status.job-running { background: #fff1c9; color: #7a5a00; }
.status.job-done { background: #dcf3e0; color: #1c6b2c; }
.status.job-failed { background: #fde2e1; color: #8a1c17; }
.status.job-stopped { background: #e8e8e8; color: #555; }
)css";

const std::string_view kJobsJs = R"js(
// The job forms (job_pages.cpp): reproduce, minimize, replay and stop post
// their fields through pillboxAction (console_static.cpp, before this
// script), then go to the job's page. The job page refreshes from
// /api/jobs/N every second while the job runs; everything shown as text.
(function () {
  document.querySelectorAll('form.job-form').forEach(function (form) {
    const result = form.querySelector('.job-result');
    form.addEventListener('submit', function (event) {
      event.preventDefault();
      const body = {};
      if (form.dataset.ids) body.ids = [form.dataset.ids];  // as text: a fleet's ids are entry ids
      if (form.hasAttribute('data-filter')) body.filter = {};
      for (const input of form.querySelectorAll('input[name]')) {
        if (input.value === '') continue;
        const value = input.hasAttribute('data-number') ? Number(input.value) : input.value;
        if (body.filter && (input.name === 'fingerprint' || input.name === 'kind' || input.name === 'raise_site')) body.filter[input.name] = value;
        else body[input.name] = value;
      }
      result.textContent = 'starting…';
      const tokenInput = form.querySelector('.job-token') || document.querySelector('.job-token');
      pillboxAction(form.dataset.action, tokenInput, body, result, function (answer) {
        if (answer.job) {
          window.location.assign('/jobs/' + encodeURIComponent(answer.job.id));
        } else {
          result.textContent = 'the console answered without a job';
        }
      });
    });
  });
})();
(function () {
  const job = document.getElementById('job');
  if (!job || job.dataset.state !== 'running') return;
  function text(id, value) {
    const node = document.getElementById(id);
    if (node) node.textContent = value;
  }
  function progressText(p) {
    if (!p || typeof p !== 'object') return '-';
    let out = p.label + ': ' + p.done + (p.total ? '/' + p.total : '');
    const counts = Object.keys(p.counts || {}).map(function (k) { return p.counts[k] + ' ' + k; }).join(', ');
    if (counts) out += '  ' + counts;
    if (p.note) out += '  ' + p.note;
    return out;
  }
  const timer = window.setInterval(function () {
    fetch(job.dataset.source, { cache: 'no-store' })
      .then(function (response) { return response.json(); })
      .then(function (answer) {
        const j = answer.job;
        if (!j) return;
        text('job-progress', progressText(j.progress));
        text('job-stderr', j.stderr_tail || '');
        if (j.state !== 'running') {
          // Ended: the page again, whole (its result, without the Stop button).
          window.clearInterval(timer);
          window.location.reload();
        }
      })
      .catch(function () { /* the next refresh tries again */ });
  }, 1000);
})();
)js";

}  // namespace pillbox::serve
