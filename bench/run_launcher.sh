#!/usr/bin/env bash
# bench/run_launcher.sh BUILD: the launcher's cost.
#   1. Output throughput: lines per second through rankwise-run (read from the
#      workers' pipes, tagged, merged, written to a file) vs the same workers
#      writing straight to files, for 1 and 4 ranks; printed as a ratio.
#   2. CPU: the launcher's own CPU time (utime+stime of the rankwise-run process
#      from /proc/<pid>/stat, children excluded) during a job logging 1,000
#      lines per second in total for 5 s, as % of one core.
# Worker: tests/programs/launch_probe (modes flood and paced).
set -uo pipefail
build=${1:-build}
run="$build/rankwise-run"
probe="$build/tests/programs/launch_probe"
[ -x "$run" ] && [ -x "$probe" ] || { echo "run_launcher.sh: build rankwise-run and launch_probe first"; exit 0; }
work=$(mktemp -d "${TMPDIR:-/tmp}/rankwise-bench-XXXXXX")
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
lines=${RANKWISE_BENCH_LINES:-200000}  # per rank
len=100
now() { date +%s.%N; }
rate() { awk -v n="$1" -v a="$2" -v b="$3" 'BEGIN {printf "%.0f", n / (b - a)}'; }

direct() {  # ranks: each worker writes its own file
  local ranks=$1 t0 t1
  t0=$(now)
  for ((r = 0; r < ranks; r++)); do RANK=$r "$probe" flood "$lines" "$len" >"$work/direct_$r.txt" & done
  wait
  t1=$(now)
  rate $((ranks * lines)) "$t0" "$t1"
}
launched() {  # ranks [n]: through the launcher, merged output into one file; prints seconds
  local ranks=$1 n=${2:-$lines} t0 t1
  t0=$(now)
  "$run" --nproc-per-node "$ranks" "$probe" flood "$n" "$len" >"$work/launched.txt" 2>/dev/null
  t1=$(now)
  local got; got=$(wc -l <"$work/launched.txt")
  [ "$got" = $((ranks * n)) ] || echo "  warning: $got lines arrived, expected $((ranks * n))" >&2
  awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}'
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "== Launcher: output throughput ($lines lines of $len bytes per rank, median of 3) =="
echo "   (through rankwise-run: wall time of the whole run, and minus the launcher's own"
echo "    start and stop, measured as the median run of the same job with 0 lines)"
for ranks in 1 4; do
  d=(); l=(); e=()
  for trial in 1 2 3; do
    d+=("$(direct "$ranks")"); l+=("$(launched "$ranks")"); e+=("$(launched "$ranks" 0)")
  done
  dm=$(printf '%s\n' "${d[@]}" | median); ls_=$(printf '%s\n' "${l[@]}" | median)
  es=$(printf '%s\n' "${e[@]}" | median)
  awk -v d="$dm" -v l="$ls_" -v e="$es" -v n=$((ranks * lines)) -v r="$ranks" 'BEGIN {
    raw = n / l
    printf "  %d rank(s): direct to file %d lines/s; through rankwise-run %d lines/s (ratio %.2f),", r, d, raw, raw / d
    # The subtraction means nothing when start/stop is (nearly) the whole run.
    if (l - e < 0.1 * l) printf " no figure without its %.2f s start/stop: that is most of the %.2f s run (raise RANKWISE_BENCH_LINES)\n", e, l
    else { net = n / (l - e); printf " %d lines/s without its %.2f s start/stop (ratio %.2f)\n", net, e, net / d } }'
done

echo "== Launcher: own CPU use, job logging 1000 lines/s in total for 5 s =="
echo "   (utime+stime of rankwise-run itself; 'idle' is the same job printing 1 line/s:"
echo "    startup, which loads libtorch for c10d's TCPStore, plus monitoring)"
tck=$(getconf CLK_TCK)
launcher_cpu() {  # ranks lines_per_s_per_rank -> "ticks wall_s lines"
  local t0 t1 pid ticks=0 stat fields
  t0=$(now)
  "$run" --nproc-per-node "$1" "$probe" paced "$2" 5 >"$work/paced.txt" 2>/dev/null &
  pid=$!
  # Fields 14 and 15 (utime, stime); sampled with builtins until it exits.
  while read -r stat 2>/dev/null <"/proc/$pid/stat"; do
    fields=(${stat##*) })
    ticks=$((fields[11] + fields[12]))
    sleep 0.1
  done
  wait "$pid"
  t1=$(now)
  echo "$ticks $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}') $(wc -l <"$work/paced.txt")"
}
for ranks in 1 4; do
  per_rank=$((1000 / ranks))
  read -r busy wall lines_out <<<"$(launcher_cpu "$ranks" "$per_rank")"
  read -r idle idle_wall _ <<<"$(launcher_cpu "$ranks" 1)"
  awk -v b="$busy" -v w="$wall" -v i="$idle" -v iw="$idle_wall" -v h="$tck" -v r="$ranks" \
      -v p="$per_rank" -v n="$lines_out" 'BEGIN {
    printf "  %d rank(s) x %d lines/s (%d lines): launcher CPU %.2f s in %.2f s wall = %.1f%% of one core;", r, p, n, b / h, w, 100 * b / h / w
    printf " idle job %.2f s in %.2f s; extra for the lines %.2f s = %.1f%% of one core over 5 s\n", i / h, iw, (b - i) / h, 100 * (b - i) / h / 5 }'
done
exit 0
