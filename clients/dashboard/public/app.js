'use strict';
// The dashboard page. It polls /api/state and draws it. Everything it shows
// may be user data (queue names, payloads, errors, queries): the DOM is built
// with createElement and textContent only, never from HTML strings, and the
// graph and charts draw text on a canvas.
(function () {
  const meta = (name) => document.querySelector(`meta[name="${name}"]`).getAttribute('content');
  const CSRF = meta('csrf-token');
  const ALLOW_ACTIONS = meta('allow-actions') === 'true';
  const REFRESH_MS = Number(meta('refresh-seconds')) * 1000;
  const HOUR_MS = 3600 * 1000;

  const { $, el, svg, table, interval, duration, time, value, payload } = window.dashboardUI;
  // renderers: what search.js and workflows.js add; post: an action's POST
  const dashboard = { state: null, cy: null, updates: 0, renderers: [], post: null, refresh: null };
  window.dashboard = dashboard; // for the browser tests and the console

  // ---- queues ------------------------------------------------------------
  function renderQueues(state) {
    const statsCols = state.stats_columns || [];
    const settingCols = state.setting_columns || [];
    const tp = (state.throughput && state.throughput.queues) || {};
    // a server with pause_queue (0.3.0) shows the paused column
    const pausable = statsCols.includes('paused');
    const rows = state.queues.map((queue) => {
      const q = tp[queue.name];
      return el('tr', { dataset: { queue: queue.name } },
        el('th', { scope: 'row' }, queue.name),
        statsCols.map((c) => el('td', {
          dataset: { col: c },
          className: c === 'paused' && queue.stats && queue.stats[c] ? 'paused' : (c === 'dead' && queue.stats && Number(queue.stats[c]) > 0 ? 'bad' : null),
          title: queue.readable ? null : 'the role lacks permission read on this queue',
        }, queue.stats ? value(queue.stats[c]) : '—')),
        el('td', { dataset: { col: 'enqueued_last_hour' } }, q ? String(q.enqueued) : '—'),
        el('td', { dataset: { col: 'finished_last_hour' } }, q ? String(q.finished) : '—'),
        pausable ? el('td', { dataset: { col: 'pause' } }, pauseButton(state, queue)) : null);
    });
    const hours = (state.throughput && state.throughput.window_hours) || 1;
    table('queues-table', ['queue', ...statsCols.map((c) => c.replace(/_/g, ' ')), `enqueued ${hours} h`, `finished ${hours} h`,
      ...(pausable ? [''] : [])], rows);
    $('queues-empty').hidden = state.queues.length > 0;
    // the settings in a table of their own: the counts fit a 1280 px screen
    table('settings-table', ['queue', ...settingCols.map((c) => c.replace(/_/g, ' '))], state.queues.map((queue) =>
      el('tr', { dataset: { queue: queue.name } }, el('th', { scope: 'row' }, queue.name),
        settingCols.map((c) => el('td', { dataset: { col: c }, className: 'setting' }, value(queue.settings[c]))))));
  }

  // ---- throughput ----------------------------------------------------------
  const charts = {};
  const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b', '#e377c2'];
  function renderThroughput(state) {
    const t = state.throughput;
    const names = Object.keys(t.queues);
    const since = t.since ? ` since ${time(t.since)}` : '';
    const how = 'enqueued = rows inserted into the queue\'s table, finished = enqueued minus the growth of its live tasks.';
    $('throughput-title').textContent = `Throughput, last ${t.window_hours === 1 ? 'hour' : `${t.window_hours} hours`}`;
    document.body.dataset.history = t.source;
    if (t.source === 'server') {
      $('throughput-note').textContent = `${t.samples} samples that the server keeps (concurrency.queue_stats_history)${since}; ${how}`;
    } else {
      $('throughput-note').textContent = t.error
        ? `sampling failed: ${t.error.message}`
        : `The server keeps no samples here (an extension before 0.4.0, not in shared_preload_libraries, or `
          + `concurrency.stats_history_interval = 0): ${t.samples} samples that the dashboard took, one every `
          + `${t.sample_seconds} s${since}, lost when it stops; ${how}`;
    }
    // the time axis spans the window from the first sample on (never a
    // range uPlot guesses from one or two points)
    const to = new Date(state.read_at).getTime() / 1000;
    const from = t.times.length ? Math.min(t.times[0], to - 300) : to - 300;
    charts.from = from;
    charts.to = to;
    for (const [key, id, field] of [['finished', 'chart-finished', 'finished_per_min'], ['live', 'chart-live', 'live']]) {
      const data = [t.times, ...names.map((n) => t.queues[n][field])];
      const signature = names.join('\u0000');
      const box = $(id);
      const width = Math.max(280, Math.floor(box.parentElement.clientWidth) - 8);
      if (!charts[key] || charts[key].signature !== signature) {
        if (charts[key]) charts[key].plot.destroy();
        const opts = {
          width, height: 180,
          series: [{}, ...names.map((n, i) => ({ label: n, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: false }))],
          axes: [{}, { size: 50 }],
          scales: {
            x: { time: true, range: () => [charts.from, charts.to] },
            y: { range: (u, min, max) => [0, Math.max(1, Number.isFinite(max) ? max : 1)] },
          },
        };
        charts[key] = { plot: new uPlot(opts, data, box), signature };
      } else {
        if (charts[key].plot.width !== width) charts[key].plot.setSize({ width, height: 180 });
        charts[key].plot.setData(data, false);
        charts[key].plot.setScale('x', { min: from, max: to });
      }
    }
  }

  // ---- dead, failing and running tasks ---------------------------------------
  // Pause or Resume, for the roles that hold manage, with --allow-actions
  function pauseButton(state, queue) {
    if (!(ALLOW_ACTIONS && state.actions && queue.may_manage)) return null;
    const paused = Boolean(queue.stats && queue.stats.paused);
    return actionButton(paused ? 'Resume' : 'Pause', paused ? 'resume' : 'pause', queue.name, null);
  }
  function actionButton(label, action, queue, id) {
    const data = id === null ? { action, queue } : { action, queue, id: String(id) };
    const b = el('button', { type: 'button', className: `action ${action}`, dataset: data }, label);
    b.addEventListener('click', () => act(b, action, queue, id));
    return b;
  }
  async function act(button, action, queue, id) {
    button.disabled = true;
    const out = $('action-result');
    try {
      const { res, body } = await post('/api/action', id === null ? { action, queue } : { action, queue, ids: [String(id)] });
      const what = id === null ? `${action} of queue ${queue}` : `${action} of task ${id} on ${queue}`;
      out.textContent = res.ok
        ? `${what}: ${id === null ? (body.changed ? 'done' : 'nothing to change') : `${body.count} changed`}`
        : `${what} refused: ${body.error.message}`;
      out.className = res.ok ? 'note' : 'note error';
    } catch (err) {
      out.textContent = `${action} failed: ${err.message}`;
      out.className = 'note error';
    }
    refresh();
  }
  async function post(path, data) {
    const res = await fetch(path, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': CSRF },
      body: JSON.stringify(data),
    });
    return { res, body: await res.json() };
  }
  dashboard.post = post;
  dashboard.mayAct = () => ALLOW_ACTIONS && dashboard.state && dashboard.state.actions;

  function renderFailed(state) {
    const rows = [];
    for (const queue of state.queues) {
      const mayAct = ALLOW_ACTIONS && state.actions && queue.may_manage;
      for (const task of [...(queue.dead || []), ...(queue.retrying || [])]) {
        rows.push(el('tr', { dataset: { queue: queue.name, task: task.id, state: task.state } },
          el('td', null, queue.name),
          el('td', { dataset: { col: 'id' } }, task.id),
          el('td', { dataset: { col: 'state' }, className: task.state === 'dead' ? 'bad' : null },
            task.state === 'dead' ? 'dead' : `retry at ${time(task.run_at)}`),
          el('td', { dataset: { col: 'attempt' } }, task.attempt),
          el('td', { dataset: { col: 'last_error' }, className: 'error-text' }, task.last_error),
          el('td', { dataset: { col: 'payload' } }, payload(task)),
          el('td', { className: 'time' }, time(task.finished_at || task.enqueued_at)),
          el('td', { className: 'buttons' }, mayAct ? [
            task.state === 'dead' ? actionButton('Retry', 'retry', queue.name, task.id) : null,
            actionButton('Cancel', 'cancel', queue.name, task.id),
          ] : null)));
      }
    }
    table('failed-table', ['queue', 'task', 'state', 'attempt', 'last error', 'payload', 'time', ''], rows);
    $('failed-empty').hidden = rows.length > 0;
    const unlisted = state.queues.filter((q) => q.readable && !q.tasks_readable && Number(q.stats.dead) > 0).map((q) => q.name);
    $('failed-unlisted').textContent = unlisted.length
      ? `Dead tasks not listed (the role sees the counts but holds no SELECT on the table): ${unlisted.join(', ')}` : '';
    const errors = state.queues.filter((q) => q.error).map((q) => `${q.name}: ${q.error.message}`);
    $('tasks-error').textContent = errors.join('; ');
    $('tasks-error').hidden = errors.length === 0;
  }
  function renderRunning(state) {
    const progress = state.queues.some((q) => q.has_progress);
    const now = Date.now();
    const rows = [];
    for (const queue of state.queues) {
      for (const task of queue.running || []) {
        const left = (new Date(task.lease_expires_at).getTime() - now) / 1000;
        rows.push(el('tr', { dataset: { queue: queue.name, task: task.id } },
          el('td', null, queue.name),
          el('td', { dataset: { col: 'id' } }, task.id),
          el('td', { dataset: { col: 'attempt' } }, task.attempt),
          el('td', { dataset: { col: 'worker' } }, value(task.worker)),
          el('td', { dataset: { col: 'lease_expires_at' }, className: task.expired ? 'bad' : null,
            title: String(task.lease_expires_at) }, task.expired ? `expired ${duration(-left)} ago` : `in ${duration(left)}`),
          progress ? el('td', { dataset: { col: 'progress' } }, task.progress === null ? '—' : el('code', null, task.progress)) : null,
          el('td', { dataset: { col: 'payload' } }, payload(task))));
      }
    }
    table('running-table', ['queue', 'task', 'attempt', 'worker', 'lease', ...(progress ? ['progress'] : []), 'payload'], rows);
    $('running-empty').hidden = rows.length > 0;
  }
  function renderSchedules(state) {
    const s = state.schedules;
    $('schedules').hidden = !s;
    if (!s) return;
    table('schedules-table', s.columns, s.rows.map((r) => el('tr', null, s.columns.map((c) => el('td', { dataset: { col: c } }, value(r[c]))))));
    if (s.error) $('schedules-table').replaceChildren(el('caption', { className: 'error' }, s.error.message));
  }

  // ---- the lock graph ------------------------------------------------------
  // A session is a node (a prepared transaction, pid 0, by its gid); an edge
  // goes from the waiter to the session in its way.
  const nodeId = (pid, gid) => (pid === 0 ? `gid:${gid}` : `pid:${pid}`);
  const short = (text, n) => (text && text.length > n ? `${text.slice(0, n - 1)}…` : text || '');
  function renderLocks(state) {
    const tree = state.lock_tree || [];
    const waits = state.lock_waits || [];
    // application and user of each session, from the edges (lock_tree of
    // this version has no such columns; where it has, they win)
    const apps = new Map();
    for (const w of waits) {
      apps.set(nodeId(w.waiting_pid, null), [w.waiting_application, w.waiting_user]);
      apps.set(nodeId(w.blocking_pid, w.blocking_gid), [w.blocking_application, w.blocking_user]);
    }
    const nodes = new Map();
    for (const r of tree) {
      const id = nodeId(r.pid, r.gid);
      const [app, user] = apps.get(id) || [];
      const who = [r.application_name || app, r.usename || user].filter(Boolean).join(' · ');
      nodes.set(id, {
        data: {
          id, pid: r.pid, root: r.depth === 0, action: r.action || null, state: r.state, query: r.query,
          label: [r.pid === 0 ? `prepared ${r.gid}` : `pid ${r.pid}`, who, r.state || '', short(r.query, 32),
            r.action ? `→ ${r.action}` : ''].filter(Boolean).join('\n'),
        },
        classes: [r.depth === 0 ? 'root' : '', r.in_cycle ? 'cycle' : ''].join(' '),
      });
    }
    const edges = [];
    for (const w of waits) {
      const source = nodeId(w.waiting_pid, null);
      const target = nodeId(w.blocking_pid, w.blocking_gid);
      for (const [id, pid, app, st, query] of [[source, w.waiting_pid, w.waiting_application, null, w.waiting_query],
        [target, w.blocking_pid, w.blocking_application, w.blocking_state, w.blocking_query]]) {
        // the edges were read a moment after the tree: a session may be new
        if (!nodes.has(id)) nodes.set(id, { data: { id, pid, root: false, label: [`pid ${pid}`, app, st, short(query, 40)].filter(Boolean).join('\n') } });
      }
      edges.push({
        data: { id: `${source}>${target}`, source, target, label: w.waiting_mode,
          object: w.locked_object, holds: w.blocking_holds },
        classes: w.blocking_holds ? 'hard' : 'soft',
      });
    }
    const seen = new Set();
    const uniqueEdges = edges.filter((e) => !seen.has(e.data.id) && seen.add(e.data.id));
    // a waiter's queued-behind edges repeat the mode of its hard one: drawn
    // without a label, so that a pile-up stays readable
    const hardSources = new Set(uniqueEdges.filter((e) => e.classes === 'hard').map((e) => e.data.source));
    for (const e of uniqueEdges) if (e.classes === 'soft' && hardSources.has(e.data.source)) e.classes = 'soft quiet';
    $('locks-empty').hidden = nodes.size > 0;
    $('lock-graph').hidden = nodes.size === 0;
    const elements = [...nodes.values(), ...uniqueEdges];
    const signature = elements.map((e) => `${e.data.id}:${e.classes || ''}:${e.data.label}`).sort().join('\n');
    if (nodes.size > 0 && (!dashboard.cy || dashboard.cy.scratch('signature') !== signature)) {
      if (!dashboard.cy) {
        dashboard.cy = cytoscape({
          container: $('lock-graph'),
          wheelSensitivity: 0.3,
          style: [
            { selector: 'node', style: { shape: 'round-rectangle', 'background-color': '#eef3f8', 'border-width': 1, 'border-color': '#7a8a9a',
              label: 'data(label)', 'text-wrap': 'wrap', 'text-max-width': 220, 'text-valign': 'center', 'font-size': 13, width: 'label', height: 'label', padding: 10 } },
            { selector: 'node.root', style: { 'background-color': '#fde8e8', 'border-color': '#c62828', 'border-width': 3 } },
            { selector: 'node.cycle', style: { 'border-style': 'double' } },
            { selector: 'edge', style: { 'curve-style': 'bezier', 'target-arrow-shape': 'triangle', width: 2, 'line-color': '#555',
              'target-arrow-color': '#555', label: 'data(label)', 'font-size': 12, color: '#444',
              'text-background-color': '#fff', 'text-background-opacity': 1, 'text-background-padding': 2 } },
            { selector: 'edge.soft', style: { 'line-style': 'dashed', 'line-color': '#999', 'target-arrow-color': '#999' } },
            { selector: 'edge.quiet', style: { label: '' } },
          ],
        });
        dashboard.cy.on('tap', 'node', (evt) => showNode(evt.target.data()));
        dashboard.cy.on('tap', 'edge', (evt) => {
          const e = evt.target.data();
          $('lock-detail').replaceChildren(`${e.source.slice(4)} waits for ${e.target.slice(4)}: ${e.label} on `, el('code', null, e.object || ''));
        });
      }
      const cy = dashboard.cy;
      cy.scratch('signature', signature);
      cy.elements().remove();
      cy.add(elements);
      // holders at the top, waiters below them
      cy.layout({ name: 'dagre', rankDir: 'BT', nodeSep: 40, rankSep: 70, edgeSep: 20, animate: false }).run();
      // readable: never drawn smaller than 80 %; a taller box where the
      // graph needs it, and panning beyond it
      const bb = cy.elements().boundingBox({ includeLabels: true });
      const box = $('lock-graph');
      const zoom = Math.min(1, Math.max(0.8, (box.clientWidth - 40) / bb.w));
      box.style.height = `${Math.min(900, Math.max(300, Math.ceil(bb.h * zoom) + 40))}px`;
      cy.resize();
      cy.zoom(zoom);
      cy.center();
    } else if (nodes.size === 0 && dashboard.cy) {
      dashboard.cy.elements().remove();
      dashboard.cy.scratch('signature', '');
    }
    const client = tree.some((r) => 'client_addr' in r);
    table('lock-roots', ['pid', 'root', 'depth', 'application', ...(client ? ['client'] : []), 'state', 'waited', 'transaction', 'query', 'suggested action'],
      tree.map((r) => el('tr', { dataset: { pid: String(r.pid), root: String(r.root_pid), depth: String(r.depth) }, className: r.depth === 0 ? 'root' : null },
        el('td', null, r.pid === 0 ? `prepared ${r.gid}` : r.pid),
        el('td', null, r.root_pid),
        el('td', null, r.depth),
        el('td', null, value(r.application_name || (apps.get(nodeId(r.pid, r.gid)) || [])[0])),
        client ? el('td', null, value(r.client_addr)) : null,
        el('td', null, value(r.state)),
        el('td', null, interval(r.waited)),
        el('td', null, interval(r.xact_age)),
        el('td', null, el('code', null, short(r.query, 120))),
        el('td', { dataset: { col: 'action' } }, r.action ? el('code', null, r.action) : ''))));
  }
  function showNode(d) {
    $('lock-detail').replaceChildren(el('strong', null, d.pid === 0 ? 'prepared transaction' : `pid ${d.pid}`), ' ',
      d.state || '', ' ', el('code', null, d.query || ''), d.action ? [' — suggested: ', el('code', null, d.action)] : null);
  }

  // ---- the lock history: episodes on a time line -----------------------------
  function renderHistory(state) {
    const h = state.lock_history;
    const box = $('history-timeline');
    if (!h || !h.enabled) {
      $('history-note').textContent = h && h.error ? `${h.error.message}. ${h.error.hint || ''}` : '';
      box.replaceChildren();
      table('history-table', [], []);
      return;
    }
    const episodes = h.episodes;
    const now = new Date(state.read_at).getTime();
    // the last hour, or less: from a little before the first episode, at
    // least the last 5 minutes
    const first = Math.min(now, ...episodes.map((e) => new Date(e.started_at).getTime()));
    const windowMs = Math.min(HOUR_MS, Math.max(5 * 60000, (now - first) * 1.1));
    const from = now - windowMs;
    $('history-note').textContent = episodes.length ? '' : 'No lock-wait episode in the last hour.';
    const width = Math.max(400, box.clientWidth || 800);
    const lane = 22;
    const left = 30;
    const span = width - left - 150;
    const x = (t) => left + ((Math.max(t, from) - from) / windowMs) * span;
    // lanes: an episode goes into the first lane free at its start
    const ends = [];
    const bars = episodes.map((e) => {
      const start = new Date(e.started_at).getTime();
      const end = e.ended_at ? new Date(e.ended_at).getTime() : now;
      let i = ends.findIndex((t) => t < start);
      if (i < 0) i = ends.push(0) - 1;
      ends[i] = end;
      return { e, start, end, lane: i };
    });
    const height = Math.max(1, ends.length) * lane + 24;
    const s = svg('svg', { width, height, viewBox: `0 0 ${width} ${height}`, class: 'timeline' });
    const step = windowMs > 20 * 60000 ? 10 : (windowMs > 10 * 60000 ? 2 : 1); // minutes between ticks
    for (let m = 0; m * 60000 <= windowMs; m += step) {
      const t = now - m * 60000;
      s.appendChild(svg('line', { x1: x(t), x2: x(t), y1: 0, y2: height - 16, class: 'tick' }));
      s.appendChild(svg('text', { x: x(t), y: height - 4, class: 'tick-label', 'text-anchor': 'middle' }, m === 0 ? 'now' : `-${m} min`));
    }
    for (const b of bars) {
      const x0 = x(b.start);
      const w = Math.max(3, x(b.end) - x0);
      const g = svg('g', { class: `episode ${b.e.ended_by || 'ongoing'}`, 'data-episode': String(b.e.episode_id), 'data-root': String(b.e.root_pid) });
      g.appendChild(svg('title', {}, `episode ${b.e.episode_id}: root pid ${b.e.root_pid} (${b.e.root_application || ''}, ${b.e.root_state || ''}) `
        + `blocked up to ${b.e.max_waiters}, ${interval(b.e.duration)}, ${b.e.ended_by || 'ongoing'}\n${b.e.root_query || ''}`));
      g.appendChild(svg('rect', { x: x0, y: b.lane * lane + 2, width: w, height: lane - 4, rx: 3 }));
      g.appendChild(svg('text', { x: x0 + w + 4, y: b.lane * lane + lane - 7, class: 'episode-label' },
        `pid ${b.e.root_pid} · ${b.e.max_waiters} waiting`));
      s.appendChild(g);
    }
    box.replaceChildren(s);
    table('history-table', ['episode', 'started', 'duration', 'root pid', 'application', 'root state', 'root query', 'max waiters', 'depth', 'waited on', 'ended by'],
      [...episodes].reverse().map((e) => el('tr', { dataset: { episode: String(e.episode_id), root: String(e.root_pid) } },
        el('td', null, e.episode_id), el('td', null, time(e.started_at)), el('td', null, interval(e.duration)),
        el('td', { dataset: { col: 'root_pid' } }, e.root_pid), el('td', null, value(e.root_application)), el('td', null, value(e.root_state)),
        el('td', null, el('code', null, short(e.root_query, 100))), el('td', null, e.max_waiters), el('td', null, e.max_depth),
        el('td', null, value(e.locked_objects)), el('td', { dataset: { col: 'ended_by' } }, e.ended_by || 'ongoing'))));
  }

  // ---- polling -------------------------------------------------------------
  function render(state) {
    dashboard.state = state;
    document.body.classList.remove('loading');
    const who = state.who;
    $('who').textContent = who
      ? `role ${who.role} on database ${who.database} (PostgreSQL ${who.server_version}, concurrency_ext ${who.extension_version || 'not installed'})`
      : '';
    $('actions-mode').textContent = state.actions ? 'actions on' : 'read only';
    $('actions-mode').className = state.actions ? 'mode on' : 'mode';
    $('updated').textContent = `updated ${time(state.read_at)}`;
    const err = $('error');
    err.hidden = !state.error;
    err.textContent = state.error ? `${state.error.message}${state.error.hint ? ` (${state.error.hint})` : ''}` : '';
    if (!state.queues) return;
    renderQueues(state);
    renderThroughput(state);
    renderFailed(state);
    renderRunning(state);
    renderSchedules(state);
    renderLocks(state);
    renderHistory(state);
    for (const hook of dashboard.renderers) hook(state);
  }

  let timer = null;
  async function refresh() {
    clearTimeout(timer);
    try {
      const res = await fetch('/api/state', { cache: 'no-store' });
      render(await res.json());
    } catch (err) {
      const e = $('error');
      e.hidden = false;
      e.textContent = `the dashboard server does not answer: ${err.message}`;
    }
    dashboard.updates += 1;
    document.body.dataset.updates = String(dashboard.updates);
    timer = setTimeout(refresh, REFRESH_MS);
  }
  dashboard.refresh = refresh;
  // the other scripts add their renderers first
  window.addEventListener('DOMContentLoaded', refresh);
})();
