'use strict';
// The charts' samples. Where the extension keeps them (0.4.0's view
// concurrency.queue_stats_history, filled by the module's schedule runner
// every concurrency.stats_history_interval where it is preloaded), the
// charts show the last --history-hours of them, whoever reads: a reload or
// a restart of the dashboard keeps its history. Elsewhere (an older version,
// no preload, sampling turned off) they come from the samples the dashboard
// takes itself while it runs (--sample), and the page says so.
const { Throughput } = require('./throughput');

const VIEW_EXISTS_SQL = `SELECT pg_catalog.to_regclass('concurrency.queue_stats_history') IS NOT NULL AS present`;
const HISTORY_SQL = `
SELECT * FROM concurrency.queue_stats_history
 WHERE sampled_at OPERATOR(pg_catalog.>=) (pg_catalog.now() OPERATOR(pg_catalog.-) pg_catalog.make_interval(hours => $1))
 ORDER BY sampled_at, queue`;
// at most one read of the view per this many ms
const REREAD_MS = 5000;

class ServerHistory {
  constructor(hours) {
    this.hours = hours;
    this.cache = null; // { at, series } of the last read
  }

  // The series of the server's samples, or null where the extension keeps
  // none here (or none recent: sampling off or not preloaded).
  async read(client) {
    const now = Date.now();
    if (this.cache && now - this.cache.at < REREAD_MS) return this.cache.series;
    let series = null;
    if ((await client.query(VIEW_EXISTS_SQL)).rows[0].present) {
      const r = await client.query(HISTORY_SQL, [this.hours]);
      if (r.rows.length > 0) {
        const t = new Throughput(this.hours * 3600 * 1000);
        t.add(r);
        series = t.series();
      }
    }
    this.cache = { at: now, series };
    return series;
  }
}

module.exports = { ServerHistory, HISTORY_SQL };
