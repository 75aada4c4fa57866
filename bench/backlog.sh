#!/usr/bin/env bash
# Draining a deep backlog: one session claims and completes every task of a
# queue filled beforehand, one transaction per task, and the index blocks
# each side reads per task are counted (pg_statio_all_indexes: exact) beside
# the time it takes. Each claimed task leaves a dead entry at the front of
# the index its claim scans, and the pages of those entries stay until
# VACUUM: a scan from the front reads them all, more for every task.
#
#   PGHOST=… PGPORT=… PGDATABASE=… bash bench/backlog.sh
#
# Sides, in one run, the order alternating from round to round:
#   ours       dequeue + complete (the claim without the executor, whose
#              backend resumes its scans past a front that is dear to walk)
#   statement  the same with concurrency.direct_claim = off: the claim
#              statement, which scans from the front every time
#   raw SQL    the seed's UPDATE … WHERE id = (SELECT id … ORDER BY id LIMIT 1
#              FOR UPDATE SKIP LOCKED) RETURNING, then DELETE, on a jobs
#              table with a primary key only
# Environment:
#   BENCH_TASKS   backlog sizes (default "2000 20000")
#   BENCH_ROUNDS  rounds per size (default 3)
# Needs a superuser (direct_claim is a superuser setting) and a server with
# concurrency_ext installed; creates and drops queue bench_backlog and table
# bench_backlog_jobs.
set -euo pipefail
TASKS=${BENCH_TASKS:-2000 20000}
ROUNDS=${BENCH_ROUNDS:-3}
export PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning"
q() { psql -XAtq -v ON_ERROR_STOP=1 "$@"; }

q <<'SQL'
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS concurrency_ext;
CREATE OR REPLACE PROCEDURE public.bench_backlog_ours(n int) LANGUAGE plpgsql AS $$
DECLARE
  t record;
BEGIN
  FOR i IN 1 .. n LOOP
    SELECT * INTO t FROM concurrency.dequeue('bench_backlog');
    IF t.task_id IS NULL THEN
      RAISE EXCEPTION 'no task to claim at %', i;
    END IF;
    PERFORM concurrency.complete('bench_backlog', t.task_id, t.lease_token);
    COMMIT;
  END LOOP;
END $$;
CREATE OR REPLACE PROCEDURE public.bench_backlog_raw(n int) LANGUAGE plpgsql AS $$
DECLARE
  j bigint;
BEGIN
  FOR i IN 1 .. n LOOP
    UPDATE bench_backlog_jobs SET status = 'running'
     WHERE id = (SELECT id FROM bench_backlog_jobs WHERE status = 'pending'
                  ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING id INTO j;
    IF j IS NULL THEN
      RAISE EXCEPTION 'no job to claim at %', i;
    END IF;
    DELETE FROM bench_backlog_jobs WHERE id = j;
    COMMIT;
  END LOOP;
END $$;
SQL

# fills the side's table with n tasks; prints its table's name
fill() { # side n
  if [ "$1" = raw ]; then
    q -c "DROP TABLE IF EXISTS bench_backlog_jobs" \
      -c "CREATE TABLE bench_backlog_jobs (id bigserial PRIMARY KEY, status text NOT NULL DEFAULT 'pending', payload jsonb NOT NULL)" \
      -c "INSERT INTO bench_backlog_jobs (payload) SELECT jsonb_build_object('n', i) FROM generate_series(1, $2) AS i" \
      -c "VACUUM ANALYZE bench_backlog_jobs"
    echo public.bench_backlog_jobs
  else
    q -c "SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name = 'bench_backlog'" \
      -c "SELECT concurrency.create_queue('bench_backlog')" \
      -c "SELECT count(*) FROM concurrency.enqueue_batch('bench_backlog', (SELECT array_agg(jsonb_build_object('n', i)) FROM generate_series(1, $2) AS i))" \
      -c 'VACUUM ANALYZE concurrency.q_bench_backlog' >/dev/null
    echo concurrency.q_bench_backlog
  fi
}

# index blocks of the table read so far (flushed statistics)
blocks() { # table
  q -c "SELECT pg_stat_force_next_flush()" >/dev/null
  q -c "SELECT sum(idx_blks_hit + idx_blks_read) FROM pg_statio_all_indexes WHERE relid = '$1'::regclass"
}

# drains n tasks with the side's procedure; prints "seconds blocks_per_task"
drain() { # side n
  local table before call t0 t1 after
  table=$(fill "$1" "$2" | tail -n 1)
  before=$(blocks "$table")
  local setting="SET concurrency.direct_claim = on"
  [ "$1" = statement ] && setting="SET concurrency.direct_claim = off"
  call="CALL bench_backlog_ours($2)"
  [ "$1" = raw ] && call="CALL bench_backlog_raw($2)"
  t0=$(date +%s.%N)
  q -c "$setting" -c "$call" >/dev/null
  t1=$(date +%s.%N)
  after=$(blocks "$table")
  awk -v a="$t0" -v b="$t1" -v x="$before" -v y="$after" -v n="$2" 'BEGIN { printf "%.3f %.2f\n", b - a, (y - x) / n }'
}

echo "PostgreSQL $(q -c 'SHOW server_version'), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); $ROUNDS round(s) per size"
echo
echo '| tasks | side | tasks/s (rounds) | index blocks per task | ours ÷ side (median of rounds) |'
echo '|---:|---|---|---:|---:|'
for n in $TASKS; do
  declare -A secs=() blks=()
  order="ours statement raw"
  for r in $(seq 1 "$ROUNDS"); do
    for side in $order; do
      read -r s b < <(drain "$side" "$n")
      secs[$side]+="$s "
      blks[$side]=$b
    done
    order=$(echo "$order" | awk '{ for (i = NF; i > 0; i--) printf "%s%s", $i, (i > 1 ? " " : "") }')
  done
  for side in ours statement raw; do
    label=$side
    [ "$side" = ours ] && label='ours (direct claim)'
    [ "$side" = statement ] && label='ours, claim statement (direct_claim = off)'
    [ "$side" = raw ] && label='raw SQL'
    rates=$(for s in ${secs[$side]}; do awk -v s="$s" -v n="$n" 'BEGIN { printf "%d ", n / s }'; done)
    ratio=''
    if [ "$side" != ours ]; then
      # per round: side's seconds ÷ ours (ours is faster when above 1)
      ratio=$(paste -d' ' <(tr ' ' '\n' <<<"${secs[ours]}" | sed '/^$/d') <(tr ' ' '\n' <<<"${secs[$side]}" | sed '/^$/d') |
        awk '{ print $2 / $1 }' | sort -g | awk '{ v[NR] = $1 } END { printf "%.2f×", v[int((NR + 1) / 2)] }')
    fi
    echo "| $n | $label | ${rates% } | ${blks[$side]} | $ratio |"
  done
  unset secs blks
done
q -c "SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name = 'bench_backlog'" \
  -c "DROP TABLE IF EXISTS bench_backlog_jobs" \
  -c "DROP PROCEDURE public.bench_backlog_ours(int)" -c "DROP PROCEDURE public.bench_backlog_raw(int)" >/dev/null
