'use strict';
// Durable workflows and counters (0.4.0): tasks sleeping (scheduled, with
// steps recorded) and tasks awaiting an event, with their steps on demand
// (concurrency.task_steps); and the counters the role may read
// (concurrency.counters). No section where the extension has neither.
(function () {
  const { $, el, table, time, value, payload } = window.dashboardUI;
  const dashboard = window.dashboard;

  async function showSteps(queue, id) {
    const box = $('steps-detail');
    const res = await fetch(`/api/steps?${new URLSearchParams({ queue, id })}`, { cache: 'no-store' });
    const body = await res.json();
    if (!res.ok) {
      box.replaceChildren(el('p', { className: 'error' }, `steps of task ${id}: ${body.error.message}`));
      return;
    }
    box.replaceChildren(el('h3', null, `Steps of task ${id} on ${queue}`),
      body.steps.length === 0 ? el('p', { className: 'empty' }, 'No step recorded.') : el('table', { id: 'steps-table' },
        el('thead', null, el('tr', null, el('th', null, 'step'), el('th', null, 'result'), el('th', null, 'recorded'))),
        el('tbody', null, body.steps.map((s) => el('tr', { dataset: { step: s.step } },
          el('td', null, s.step), el('td', null, el('code', null, s.result === null ? '—' : s.result)),
          el('td', { className: 'time' }, time(s.recorded_at)))))));
  }

  function render(state) {
    const withWorkflows = state.queues.filter((q) => q.has_workflows);
    $('workflows').hidden = withWorkflows.length === 0 && !state.counters;
    const rows = [];
    for (const queue of withWorkflows) {
      for (const t of queue.workflow || []) {
        const steps = el('button', { type: 'button', className: 'steps', dataset: { queue: queue.name, task: String(t.id) } }, `${t.steps} step${Number(t.steps) === 1 ? '' : 's'}`);
        steps.addEventListener('click', () => showSteps(queue.name, t.id));
        rows.push(el('tr', { dataset: { queue: queue.name, task: String(t.id), waits: t.waits_for } },
          el('td', null, queue.name),
          el('td', { dataset: { col: 'id' } }, t.id),
          el('td', { dataset: { col: 'waits_for' } }, t.waits_for === 'awaiting' ? 'awaits event' : 'sleeps'),
          el('td', { dataset: { col: 'event' } }, t.awaiting === null ? '' : el('code', null, t.awaiting)),
          el('td', { className: 'time', title: String(t.run_at) }, t.waits_for === 'awaiting' ? `times out ${time(t.run_at)}` : `until ${time(t.run_at)}`),
          el('td', null, steps),
          el('td', { dataset: { col: 'payload' } }, payload(t))));
      }
    }
    table('workflow-table', ['queue', 'task', 'waits', 'event', 'when', 'steps', 'payload'], rows);
    $('workflow-empty').hidden = rows.length > 0 || withWorkflows.length === 0;
    const c = state.counters;
    $('counters-part').hidden = !c;
    if (!c) return;
    table('counters-table', ['counter', 'value', 'slots', 'min', 'max'], c.rows.map((r) =>
      el('tr', { dataset: { counter: r.name } }, el('td', null, r.name), el('td', { dataset: { col: 'value' } }, value(r.value)),
        el('td', null, r.slots), el('td', null, value(r.min_value)), el('td', null, value(r.max_value)))));
    $('counters-empty').hidden = c.rows.length > 0;
    $('counters-error').textContent = c.error ? c.error.message : '';
  }

  dashboard.renderers.push(render);
})();
