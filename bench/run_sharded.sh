#!/usr/bin/env bash
# bench/run_sharded.sh BUILD: sharded checkpoints of SIZE MiB (default 1 GiB)
# on 2 ranks, in the same run, trials interleaved:
#   (a) rankwise::checkpoint::save_sharded: every rank writes its rows (bench_sharded);
#   (b) the same state gathered onto rank 0 and written by rankwise::checkpoint::save;
#   (c) Python's torch.distributed.checkpoint.save (DCP, PyTorch 2.x, Gloo,
#       2 ranks under torchrun) on the same state (bench/sharded_reference.py);
#   (d) the disk's sequential write bandwidth: dd conv=fdatasync of SIZE MiB.
# Then resharding loads of (a)'s checkpoint at 3 ranks and at 1 rank (and
# at 2), each counting the bytes every rank read against those it needs.
# dd too does one untimed run before its timed one, as (a)-(c) do.
# Goals (issue 16): (a) >= 0.85 of (d) and >= 1.2x (c); each rank's peak
# memory during (a) <= its shard + 64 MiB; a resharding load reads <= 1.1x
# the bytes each rank needs.
# DCP needs PyTorch 2.x: BUILD's reference Python when its torch is 2.x,
# else the wheel's venv (build-wheel/venv, `make build TORCH=wheel`); without
# either the DCP column is skipped with a line saying so. The C++ side runs
# on BUILD's libtorch. Each of the TRIALS (3) launches does one untimed
# warm-up and one timed save per side; figures are medians of the trials.
# Files go to BUILD/bench/sharded-tmp (the build's disk), removed at the end.
set -uo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/reference_python.sh"
. "$here/disk_bandwidth.sh"
bench="$build/bench/bench_sharded"
run="$build/rankwise-run"
[ -x "$bench" ] || { echo "run_sharded.sh: build bench_sharded first"; exit 0; }
size=${RANKWISE_BENCH_SHARDED_MIB:-1024}
trials=${RANKWISE_BENCH_SHARDED_TRIALS:-3}
dir="$build/bench/sharded-tmp"
mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
# The sharded checkpoint, the gathered file or DCP's (one at a time), dd's, with margin.
enough_space "$dir" $((4 * size)) run_sharded.sh || exit 0

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a == "" || b == "" || b == 0) print "n/a"; else printf "%.2f", a / b}'; }
field() { sed -nE "s/^$1=([0-9.,]+)$/\1/p"; }  # key, reads key=value lines

# The Python with torch 2.x for DCP.
dcp_py=""
for candidate in "$(reference_python "$build")" "$here/../build-wheel/venv/bin/python"; do
  major=$("$candidate" -c 'import torch; print(torch.__version__.split(".")[0])' 2>/dev/null) || continue
  if [ "$major" -ge 2 ] && [ -x "$(dirname "$candidate")/torchrun" ]; then dcp_py=$candidate; break; fi
done
dcp_version=""
[ -n "$dcp_py" ] && dcp_version=$("$dcp_py" -c 'import torch; print(torch.__version__)')

echo "== Sharded checkpoints, $size MiB on 2 ranks: save_sharded vs gathered rankwise::checkpoint::save vs DCP vs dd (MiB/s, median of $trials) =="
echo "  disk: $(df -P "$dir" | awk 'NR == 2 {print $1 " on " $6}'); C++: $build; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -z "$dcp_py" ]; then
  echo "  DCP skipped: no Python with torch 2.x and torchrun (BUILD's reference Python, build-wheel/venv); make build TORCH=wheel"
else
  echo "  DCP: torch $dcp_version ($dcp_py)"
fi
dds=() shs=() gas=() dcps=() out=""
for ((t = 1; t <= trials; t++)); do
  # dd gets an untimed warm-up as the other sides do: on this VM (ext4 mounted with `discard` on a
  # virtual disk) the first large write after a pause ran at 130-360 MiB/s and the next ones at ~1,900.
  dd_mib_per_s "$dir" "$size" >/dev/null
  dd=$(dd_mib_per_s "$dir" "$size")
  out=$("$run" --nproc-per-node 2 --no-tag "$bench" "$size" "$dir" 1 save 2>"$dir/err")
  sed "s/^/  trial $t: /" "$dir/err"
  sh=$(field sharded_mib_per_s <<<"$out")
  ga=$(field gathered_mib_per_s <<<"$out")
  dc=""
  if [ -n "$dcp_py" ]; then
    port=$("$dcp_py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    dc=$(OMP_NUM_THREADS=1 "$(dirname "$dcp_py")/torchrun" --nproc-per-node 2 --master-addr 127.0.0.1 \
      --master-port "$port" "$here/sharded_reference.py" "$size" "$dir" 1 2>"$dir/err" | field save_mib_per_s)
    grep -E 'seconds|Error|error' "$dir/err" | sed "s/^/  trial $t: /"
  fi
  echo "  trial $t: dd $dd, sharded $sh, gathered $ga, dcp ${dc:-n/a} (MiB/s)"
  dds+=("$dd") shs+=("$sh") gas+=("$ga") dcps+=("${dc:-}")
done
dd=$(printf '%s\n' "${dds[@]}" | median)
sh=$(printf '%s\n' "${shs[@]}" | median)
ga=$(printf '%s\n' "${gas[@]}" | median)
dc=""
[ -n "$dcp_py" ] && dc=$(printf '%s\n' "${dcps[@]}" | median)
echo "  memory, last trial, MiB per rank (rank 0,rank 1): RSS before the state $(field base_rss_mib <<<"$out")," \
  "after the saves $(field held_rss_mib <<<"$out"); shard $(field shard_mib <<<"$out");" \
  "added at the peak of save_sharded $(field sharded_added_mib <<<"$out"), of the gathered save" \
  "$(field gathered_added_mib <<<"$out") (VmHWM after the save minus VmRSS before, largest of warm-up and trial)"
over=$(field sharded_added_mib_max <<<"$out")

load_rows=()
for world in 3 1 2; do
  lo=$("$run" --nproc-per-node "$world" --no-tag "$bench" "$size" "$dir" 1 load 2>&1)
  rate=$(field load_mib_per_s <<<"$(sed -nE 's/^world=[0-9]+ //p' <<<"$lo")")
  [ -z "$rate" ] && echo "  load at $world: $lo"
  load_rows+=("$(printf '| 2 -> %d | %7s | %s | %s | %s |' "$world" "$rate" "$(field needed_mib <<<"$lo")" \
    "$(field read_mib <<<"$lo")" "$(field read_over_needed_max <<<"$lo")")")
done
echo "  load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

echo
echo "Save of $size MiB on 2 ranks (every side durable: files fsynced), MiB/s:"
echo "| dd conv=fdatasync | save_sharded | gathered + rankwise::checkpoint::save | DCP save | sharded / dd (goal >= 0.85) | sharded / DCP (goal >= 1.2) | sharded / gathered | memory a rank's save_sharded adds at its peak, MiB, max over ranks (goal <= 64 beyond the shard) |"
echo "|------:|------:|------:|------:|------:|------:|------:|------:|"
printf '| %7s | %7s | %7s | %7s | %5s | %5s | %5s | %5s |\n' "$dd" "$sh" "$ga" "${dc:-n/a}" \
  "$(ratio "$sh" "$dd")" "$(ratio "$sh" "$dc")" "$(ratio "$sh" "$ga")" "$over"
echo
echo "Resharding loads of the 2-rank checkpoint (page cache; bytes read: /proc/self/io rchar), MiB per rank:"
echo "| ranks | load MiB/s | needed | read | max read / needed (goal <= 1.1) |"
echo "|------:|------:|------:|------:|------:|"
printf '%s\n' "${load_rows[@]}"
exit 0
