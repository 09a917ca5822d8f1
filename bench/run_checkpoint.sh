#!/usr/bin/env bash
# bench/run_checkpoint.sh BUILD: checkpoint save/load throughput, rankwise vs
# Python's torch.save/torch.load on the same state (bench/checkpoint_reference.py),
# and vs the disk's own sequential write bandwidth measured in the same run
# (dd if=/dev/zero bs=1M conv=fdatasync), for a 256 MiB and a 1 GiB state.
# Goals (issue 16): save >= 0.85 of dd; load >= torch.load, fresh and reused memory.
#
# Every figure is MiB of tensor data per second, the median of 5 trials (3
# for loads into fresh memory, which are slow and steady) after one untimed
# warm-up (each side, each series, dd too). Loads read the file from
# the page cache (warm) on both sides. Loads are measured in two memory
# regimes, set the same way for both sides with glibc's malloc tunables:
#   fresh:  every tensor gets newly mapped pages (glibc.malloc.mmap_threshold
#           fixed at 128 KiB), as a job loading once at start; on this VM the
#           first touch of new pages dominates
#   reused: tensors reuse memory freed by the previous trial (no mmap, no trim):
#           the cost of the code itself.
# With glibc's defaults a process lands in one or the other depending on its
# allocation history (the dynamic mmap threshold), which makes loads bimodal.
# Files go to BUILD/bench/ckpt-tmp (same disk as the build), removed at the end.
set -uo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/reference_python.sh"
. "$here/disk_bandwidth.sh"
py=$(reference_python "$build")
bench="$build/bench/bench_checkpoint"
[ -x "$bench" ] || { echo "run_checkpoint.sh: build bench_checkpoint first"; exit 0; }
sizes=${RANKWISE_BENCH_CKPT_SIZES:-"256 1024"}
trials=5        # dd, saves, loads into reused memory
fresh_trials=3  # loads into fresh memory
dir="$build/bench/ckpt-tmp"
mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
fresh_env="glibc.malloc.mmap_threshold=131072"
reused_env="glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"

enough_space "$dir" $((3 * 1024)) run_checkpoint.sh || exit 0  # the largest file, dd's and a temp file

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a == "" || b == "" || b == 0) print "n/a"; else printf "%.2f", a / b}'; }
field() { sed -nE "s/^$1=([0-9.]+)$/\1/p"; }  # key, reads key=value lines

exec 3>&1  # the script's stdout, for lines printed from inside $(...)
side() {  # label tunables command...: runs one side; prints its key=value lines,
          # and its per-trial seconds (stderr) to the script's stdout
  local label=$1 tunables=$2 out
  shift 2
  out=$(GLIBC_TUNABLES=$tunables "$@" 2>"$dir/err")
  sed "s/^/  $label: /" "$dir/err" >&3
  echo "$out"
}

echo "== Checkpoints: rankwise::checkpoint::save/load vs torch.save/torch.load vs dd (MiB/s, median of $trials, or $fresh_trials for fresh-memory loads, after a warm-up) =="
echo "  disk: $(df -P "$dir" | awk 'NR == 2 {print $1 " on " $6}'); loads from the page cache; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
save_rows=() load_rows=()
for size in $sizes; do
  dd_warm=$(dd_mib_per_s "$dir" "$size")
  dds=()
  for ((t = 0; t < trials; t++)); do dds+=("$(dd_mib_per_s "$dir" "$size")"); done
  dd=$(printf '%s\n' "${dds[@]}" | median)
  echo "  $size MiB dd MiB/s: (warm-up $dd_warm) ${dds[*]}"

  rw=$(side "$size MiB" "" "$bench" "$size" "$dir" "$trials" save)
  pt=$(side "$size MiB" "" "$py" "$here/checkpoint_reference.py" "$size" "$dir" "$trials" save)
  rw_save=$(field save_mib_per_s <<<"$rw")
  pt_save=$(field save_mib_per_s <<<"$pt")
  pt_fsync=$(field save_fsync_mib_per_s <<<"$pt")
  save_rows+=("$(printf '| %4s MiB | %7s | %7s | %7s | %7s | %5s | %5s | %5s |' \
    "$size" "$dd" "$rw_save" "$pt_save" "$pt_fsync" \
    "$(ratio "$rw_save" "$pt_save")" "$(ratio "$rw_save" "$pt_fsync")" "$(ratio "$rw_save" "$dd")")")

  for regime in fresh reused; do
    env_var=${regime}_env
    n=$trials
    [ "$regime" = fresh ] && n=$fresh_trials
    rw=$(side "$size MiB $regime" "${!env_var}" "$bench" "$size" "$dir" "$n" load)
    pt=$(side "$size MiB $regime" "${!env_var}" "$py" "$here/checkpoint_reference.py" "$size" "$dir" "$n" load)
    rw_load=$(field load_mib_per_s <<<"$rw")
    rw_verify=$(field verify_mib_per_s <<<"$rw")
    pt_load=$(field load_mib_per_s <<<"$pt")
    load_rows+=("$(printf '| %4s MiB | %-6s | %7s | %7s | %5s | %7s |' \
      "$size" "$regime" "$rw_load" "$pt_load" "$(ratio "$rw_load" "$pt_load")" "$rw_verify")")
  done
done
echo "  load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

echo
echo "Save (durable on the rankwise side: temp file, fsync, rename, directory fsync), MiB/s:"
echo "| state | dd conv=fdatasync | rankwise save | torch.save | torch.save + fsync | rw / torch.save | rw / (torch.save + fsync) | rw / dd (goal >= 0.85) |"
echo "|------:|------:|------:|------:|------:|------:|------:|------:|"
printf '%s\n' "${save_rows[@]}"
echo
echo "Load from the page cache (rankwise verifies the CRC-32 first; torch.load checks nothing), MiB/s:"
echo "| state | memory | rankwise load | torch.load | rw / torch.load (goal >= 1.0) | rankwise CRC-32 pass alone |"
echo "|------:|:-------|------:|------:|------:|------:|"
printf '%s\n' "${load_rows[@]}"
exit 0
