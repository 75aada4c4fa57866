'use strict';
// Search: the tasks of a queue by state, payload (containment: the JSON
// given must be contained in the task's payload) and error text, 50 a page
// (keyset: "Older" asks for the tasks below the last id shown), with the
// count of all that match; and Retry / Cancel of every matching task, after
// a confirmation that shows how many (the server refuses if they changed).
(function () {
  const { $, el, table, time, payload } = window.dashboardUI;
  const dashboard = window.dashboard;
  let current = null; // { filter, pages: [after values], result }

  function filterFromForm() {
    return {
      queue: $('search-queue').value,
      state: $('search-state').value,
      payload: $('search-payload').value,
      error: $('search-error').value,
    };
  }

  async function run(filter, after) {
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(filter)) if (v) params.set(k, v);
    if (after) params.set('after', after);
    $('search-note').textContent = 'Searching…';
    $('search-note').className = 'note';
    const res = await fetch(`/api/tasks?${params}`, { cache: 'no-store' });
    const body = await res.json();
    if (!res.ok) {
      $('search-note').textContent = `search refused: ${body.error.message}`;
      $('search-note').className = 'note error';
      return;
    }
    current = { filter, after: after || null, result: body, pages: current && current.filter === filter ? current.pages : [] };
    draw(body);
  }

  function draw(r) {
    const states = Object.entries(r.by_state).map(([s, n]) => `${s} ${n}`).join(', ');
    $('search-note').textContent = `${r.count} tasks match${states ? ` (${states})` : ''}; showing ${r.tasks.length}`
      + `${current.pages.length ? `, page ${current.pages.length + 1}` : ''}.`;
    $('search-count').textContent = String(r.count);
    table('search-table', ['task', 'state', 'attempt', 'last error', 'payload', 'enqueued', 'run at'], r.tasks.map((t) =>
      el('tr', { dataset: { task: String(t.id), state: t.state } },
        el('td', { dataset: { col: 'id' } }, t.id),
        el('td', { dataset: { col: 'state' }, className: t.state === 'dead' ? 'bad' : null }, t.state),
        el('td', null, t.attempt),
        el('td', { className: 'error-text' }, t.last_error),
        el('td', { dataset: { col: 'payload' } }, payload(t)),
        el('td', { className: 'time' }, time(t.enqueued_at)),
        el('td', { className: 'time' }, time(t.run_at)))));
    $('search-older').hidden = !r.next_after;
    $('search-newer').hidden = current.pages.length === 0;
    const mayAct = dashboard.mayAct();
    $('search-bulk').hidden = !mayAct;
    $('bulk-retry').textContent = `Retry the ${r.bulk.retry} dead…`;
    $('bulk-retry').disabled = r.bulk.retry === 0;
    $('bulk-cancel').textContent = `Cancel the ${r.bulk.cancel} unfinished…`;
    $('bulk-cancel').disabled = r.bulk.cancel === 0;
  }

  // The confirmation: the server counts what the action would change and
  // gives a digest of those ids; Confirm sends both back.
  async function ask(action) {
    const out = $('bulk-result');
    const { res, body } = await dashboard.post('/api/bulk/preview', { action, filter: current.filter });
    if (!res.ok) {
      out.textContent = `${action} refused: ${body.error.message}`;
      out.className = 'note error';
      return;
    }
    const box = $('bulk-confirm');
    box.hidden = false;
    box.dataset.action = action;
    box.dataset.count = String(body.count);
    $('bulk-question').textContent = `${action === 'retry' ? 'Retry' : 'Cancel'} ${body.count} `
      + `task${body.count === 1 ? '' : 's'} of queue ${body.queue} that match this search?`;
    $('bulk-yes').onclick = () => confirm(action, body);
  }

  async function confirm(action, preview) {
    $('bulk-confirm').hidden = true;
    const out = $('bulk-result');
    const { res, body } = await dashboard.post('/api/bulk', { action, filter: current.filter, count: preview.count, digest: preview.digest });
    out.textContent = res.ok ? `${action}: ${body.count} of ${preview.count} tasks changed` : `${action} refused: ${body.error.message}`;
    out.className = res.ok ? 'note' : 'note error';
    dashboard.refresh();
    await run(current.filter, null);
  }

  function queues(state) {
    const select = $('search-queue');
    const names = state.queues.filter((q) => q.tasks_readable).map((q) => q.name);
    const have = [...select.options].map((o) => o.value);
    if (have.join('\u0000') === names.join('\u0000')) return;
    const chosen = select.value;
    select.replaceChildren(...names.map((n) => el('option', { value: n }, n)));
    if (names.includes(chosen)) select.value = chosen;
    $('search').hidden = names.length === 0;
  }

  $('search-form').addEventListener('submit', (e) => {
    e.preventDefault();
    current = null;
    $('bulk-result').textContent = '';
    run(filterFromForm(), null);
  });
  $('search-older').addEventListener('click', () => {
    current.pages.push(current.after);
    run(current.filter, current.result.next_after);
  });
  $('search-newer').addEventListener('click', () => run(current.filter, current.pages.pop()));
  $('bulk-retry').addEventListener('click', () => ask('retry'));
  $('bulk-cancel').addEventListener('click', () => ask('cancel'));
  $('bulk-no').addEventListener('click', () => { $('bulk-confirm').hidden = true; });
  dashboard.renderers.push(queues);
})();
