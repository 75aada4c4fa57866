'use strict';
// Throughput over a window, from samples of queue_stats: those the extension
// keeps (the view queue_stats_history, 0.4.0, preloaded), or else those the
// dashboard takes while it runs. Between two
// samples of a queue:
//   enqueued = tasks inserted into its table (pg_stat_get_tuples_inserted)
//   finished = enqueued - growth of its live tasks (every count but dead,
//              done and cancelled): the tasks that were completed, failed
//              for good or cancelled in the interval.
// Inserted-tuple counts are the server's cumulative statistics: a backend
// reports them when its transaction ends (at most about a second late), an
// enqueue that rolled back counts as enqueued and finished, and a reset of
// the statistics or a re-created table starts the queue's series again.

const WINDOW_MS = 60 * 60 * 1000;
const FINISHED_COLUMNS = new Set(['dead', 'done', 'cancelled']);

// The live counts of a queue_stats row: its bigint columns (pg type 20)
// except the finished ones, so that a state a later version adds (waiting)
// counts without a change here.
function liveColumns(fields) {
  return fields.filter((f) => f.dataTypeID === 20 && f.name !== 'inserted' && f.name !== 'relid' && f.name !== 'sampled_at'
    && !FINISHED_COLUMNS.has(f.name)).map((f) => f.name);
}

class Throughput {
  // windowMs: how far back the series go
  constructor(windowMs = WINDOW_MS) {
    this.samples = []; // { at: ms, queues: Map(queue -> { relid, inserted, live }) }
    this.windowMs = windowMs;
  }

  // result: the rows and fields of queries.SAMPLE_SQL (one sample), or of
  // the view queue_stats_history (the samples in sampled_at order)
  add(result) {
    const live = liveColumns(result.fields);
    let sample = null;
    for (const row of result.rows) {
      const at = new Date(row.sampled_at).getTime();
      if (!sample || sample.at !== at) {
        if (sample) this.push(sample);
        sample = { at, queues: new Map() };
      }
      if (row.relid === null || row.ready === null || row.inserted === null) continue; // no read permission: counts are NULL
      sample.queues.set(row.queue, {
        relid: String(row.relid),
        inserted: Number(row.inserted),
        live: live.reduce((sum, c) => sum + Number(row[c] ?? 0), 0),
      });
    }
    this.push(sample || { at: Date.now(), queues: new Map() });
  }

  push(sample) {
    this.samples.push(sample);
    const oldest = sample.at - this.windowMs;
    while (this.samples.length > 1 && this.samples[1].at <= oldest) this.samples.shift();
  }

  // { times: [s], queues: { name: { finished_per_min: [], enqueued_per_min: [],
  //   live: [], enqueued, finished } }, samples }: per interval between
  // consecutive samples, rates per minute (null where the queue was not
  // sampled on both sides), and totals over the window.
  series() {
    const names = new Set();
    for (const s of this.samples) for (const q of s.queues.keys()) names.add(q);
    const out = { times: [], queues: {}, samples: this.samples.length,
      since: this.samples.length ? new Date(this.samples[0].at).toISOString() : null };
    for (const q of [...names].sort()) out.queues[q] = { finished_per_min: [], enqueued_per_min: [], live: [], enqueued: 0, finished: 0 };
    for (let i = 1; i < this.samples.length; i++) {
      const a = this.samples[i - 1];
      const b = this.samples[i];
      const minutes = (b.at - a.at) / 60000;
      out.times.push(b.at / 1000);
      for (const q of names) {
        const s = out.queues[q];
        const x = a.queues.get(q);
        const y = b.queues.get(q);
        const enqueued = x && y && x.relid === y.relid ? y.inserted - x.inserted : -1;
        if (enqueued < 0 || minutes <= 0) {
          s.finished_per_min.push(null);
          s.enqueued_per_min.push(null);
        } else {
          const finished = enqueued - (y.live - x.live);
          s.enqueued += enqueued;
          s.finished += finished;
          s.enqueued_per_min.push(enqueued / minutes);
          s.finished_per_min.push(finished / minutes);
        }
        s.live.push(y ? y.live : null);
      }
    }
    return out;
  }
}

module.exports = { Throughput, liveColumns, WINDOW_MS };
