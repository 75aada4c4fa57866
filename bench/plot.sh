#!/usr/bin/env bash
# Draws the CSV files written by bench/figures.sh as SVG plots with gnuplot
# (Debian: gnuplot-nox), next to them.
# Usage: bash bench/plot.sh [dir]   (default docs/figures)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-docs/figures}
note=$(cat "$dir/README.txt" 2>/dev/null | sed 's/^# //' || true)
gnuplot <<GP
set terminal svg size 640,400 dynamic font "sans,11"
set datafile separator ","
set key top left
set grid
set title font "sans,12"

set output "$dir/queue_throughput.svg"
set title "Queue: dequeue + complete throughput vs clients\n{/*0.8 $note}"
set xlabel "clients"
set ylabel "transactions per second"
set logscale x 2
set yrange [0:*]
plot "$dir/queue_throughput.csv" every ::1 using 1:2 with linespoints lw 2 pt 7 title "concurrency.dequeue + complete" noenhanced, \
     "" every ::1 using 1:3 with linespoints lw 2 pt 5 title "raw SKIP LOCKED SQL on a jobs table" noenhanced

set output "$dir/claim_latency.svg"
set title "Queue: claim latency vs tasks ahead of the first claimable one\n{/*0.8 $note}"
set xlabel "leased + scheduled tasks ahead (raw SQL: running jobs ahead)"
set ylabel "ms per claim statement"
set logscale x 10
set xrange [0.5:*]
plot "$dir/claim_latency.csv" every ::1 using (\$1 < 1 ? 1 : \$1):2 with linespoints lw 2 pt 7 title "concurrency.dequeue" noenhanced, \
     "" every ::1 using (\$1 < 1 ? 1 : \$1):3 with linespoints lw 2 pt 5 title "raw SKIP LOCKED SQL" noenhanced

set output "$dir/lock_tree_latency.svg"
set title "Diagnostics: one look at the wait graph vs waiting sessions\n{/*0.8 $note}"
set xlabel "sessions waiting (behind a DDL that waits for an idle transaction)"
set ylabel "ms per query"
unset logscale x
set xrange [0:*]
set logscale y 10
set key top left
set yrange [*:*]
plot "$dir/lock_tree_latency.csv" every ::1 using 1:2 with linespoints lw 2 pt 7 title "concurrency.lock_tree" noenhanced, \
     "" every ::1 using 1:3 with linespoints lw 2 pt 5 title "raw edges: pg_blocking_pids over pg_stat_activity" noenhanced, \
     "" every ::1 using 1:4 with linespoints lw 2 pt 9 title "recursive-CTE lock tree" noenhanced
GP
echo "written: $dir/queue_throughput.svg $dir/claim_latency.svg $dir/lock_tree_latency.svg"
