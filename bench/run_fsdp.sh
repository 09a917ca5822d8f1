#!/usr/bin/env bash
# bench/run_fsdp.sh BUILD [OTHER_BUILD]: fully sharded training (issue 48),
# side by side with DDP, ZeRO-1 and PyTorch's own fully_shard, as ratios.
# Programs: BUILD/bench/fsdp_bench (bench/fsdp_bench.cpp) under rankwise-run,
# bench/fsdp_reference.py (PyTorch 2.x fully_shard, Gloo, torchrun).
#   memory:     peak resident memory per rank (VmHWM, minus the VmHWM right
#               after dist::init) for 16 x Linear(4096, 4096) (1.0 GiB of
#               float32 parameters), Adam, 3 steps of 8 rows per rank, at 2, 3
#               and 4 ranks: ddp, zero1 (DDP + ZeroRedundancyOptimizer), fsdp.
#               The training peak is measured after resetting VmHWM
#               (/proc/self/clear_refs) once the model is wrapped; the start-up
#               peak (model built whole on every rank, then wrapped) apart.
#               Goal: fsdp <= 4 * params / N + 2 units + 64 MiB.
#   capacity:   the most blocks K of Linear(4096, 4096) that train 2 Adam steps
#               (4 rows per rank) at 4 ranks under ddp and under fsdp, each
#               attempt a separate launch in a memory cgroup (the machine
#               survives; an attempt past it is OOM-killed and the launcher's
#               root-cause line is shown), predicted from two small attempts
#               and bracketed to 1/8 (goal: fsdp >= 3x ddp's parameters).
#   speed:      8 x Linear(1024, 1024), Adam, 2 ranks, batch 64 per rank,
#               5 untimed + 15 timed steps: rankwise fsdp, fsdp without
#               prefetch and ddp on every leg given, PyTorch's fully_shard
#               (2.x) once per trial; TRIALS alternating launches, medians.
#   reduce:     the engine's all-gather and reduce-scatter on one unit's
#               buffer (4 MiB and 64 MiB) at 2 ranks, on every leg given:
#               time and loopback bytes per call (1.13: the reduce-scatter is
#               an all_reduce of the whole buffer).
# Only OTHER_BUILD's speed and reduce sections run (both legs in one run).
# Environment: RANKWISE_BENCH_FSDP_SECTIONS (default "memory capacity speed
# reduce"), RANKWISE_BENCH_FSDP_TRIALS (3; speed), RANKWISE_BENCH_FSDP_LIMIT_MIB
# (the cgroup's limit; default min(22528, MemAvailable - 1024)),
# RANKWISE_BENCH_FSDP_CAPACITY_SECONDS (600; the search stops there),
# RANKWISE_BENCH_FSDP_ATTEMPT_SECONDS (300; one capacity attempt).
# Loopback byte counts are the machine's whole lo counter: run alone.
set -uo pipefail
build=${1:-build}
other=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/reference_python.sh"
bench="$build/bench/fsdp_bench"
[ -x "$bench" ] || { echo "run_fsdp.sh: build fsdp_bench first (cmake --build $build --target fsdp_bench)"; exit 0; }
sections=${RANKWISE_BENCH_FSDP_SECTIONS:-memory capacity speed reduce}
trials=${RANKWISE_BENCH_FSDP_TRIALS:-3}
export OMP_NUM_THREADS=1
work=$(mktemp -d "${TMPDIR:-/tmp}/rankwise-bench-fsdp-XXXXXX")

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/ || b == 0) print "n/a"; else printf "%.2f", a / b}'; }
field() { grep -oE "(^| )$1=[^ ]+" | head -1 | sed -E "s/^ ?$1=//"; }  # key=value anywhere in a line
maxof() { sed -nE "s/^$1=.* max=([0-9.]+).*/\1/p" | head -1; }      # key=r0,r1,... max=M
have() { [[ " $sections " == *" $1 "* ]]; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
compiling() { local n; n=$(pgrep -c -x cc1plus 2>/dev/null); echo "${n:-0}"; }

# --- A memory cgroup for the runs that may exhaust the machine --------------
limit_mib=${RANKWISE_BENCH_FSDP_LIMIT_MIB:-}
if [ -z "$limit_mib" ]; then
  avail=$(awk '/^MemAvailable:/ {print int($2 / 1024)}' /proc/meminfo)
  limit_mib=$((avail - 1024 < 22528 ? avail - 1024 : 22528))
fi
cg="" cg_kind=""
cg_setup() {
  local bytes=$((limit_mib * 1024 * 1024)) dir
  if [ -d /sys/fs/cgroup/memory ] && [ -w /sys/fs/cgroup/memory ]; then  # cgroup v1
    dir=/sys/fs/cgroup/memory/rankwise-bench-fsdp-$$
    if mkdir "$dir" 2>/dev/null && echo "$bytes" >"$dir/memory.limit_in_bytes" 2>/dev/null; then
      cg=$dir cg_kind=v1; return 0
    fi
    rmdir "$dir" 2>/dev/null
  fi
  if grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then  # cgroup v2
    dir=/sys/fs/cgroup/rankwise-bench-fsdp-$$
    if mkdir "$dir" 2>/dev/null && echo "$bytes" >"$dir/memory.max" 2>/dev/null; then
      echo 0 >"$dir/memory.swap.max" 2>/dev/null
      cg=$dir cg_kind=v2; return 0
    fi
    rmdir "$dir" 2>/dev/null
  fi
  if systemd-run --scope --quiet -p MemoryMax=1G true >/dev/null 2>&1; then cg_kind=systemd; return 0; fi
  return 1
}
in_limit() {  # COMMAND...: run in the cgroup
  case $cg_kind in
    v1 | v2) bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" "$@" ;;
    systemd) systemd-run --scope --quiet -p MemoryMax="${limit_mib}M" -p MemorySwapMax=0 "$@" ;;
    *) "$@" ;;
  esac
}
oom_kills() {
  case $cg_kind in
    v1) awk '/^oom_kill / {print $2}' "$cg/memory.oom_control" ;;
    v2) awk '/^oom_kill / {print $2}' "$cg/memory.events" ;;
    *) echo 0 ;;
  esac
}
cleanup() {
  rm -rf "$work"
  [ -n "$cg" ] && rmdir "$cg" 2>/dev/null
}
trap cleanup EXIT
cg_setup || cg_kind=""

# One launch of fsdp_bench: BUILD WORLD ARGS... -> its output (and the launcher's) in $work/out.
launch() {
  local b=$1 world=$2
  shift 2
  in_limit timeout "${attempt_seconds:-600}" "$b/rankwise-run" --nproc-per-node "$world" --no-tag \
    "$b/bench/fsdp_bench" "$@" >"$work/out" 2>&1
}
root_cause() { grep -m1 'root cause' "$work/out" | sed 's/^rankwise-run: //'; }

echo "== Fully sharded training (issue 48): fsdp vs ddp vs zero1 vs PyTorch's fully_shard =="
echo "  C++: $build${other:+ and $other}; load average at start: $(load); compilers running: $(compiling);" \
  "memory: $(awk '/^MemAvailable:/ {printf "%d MiB available", $2 / 1024}' /proc/meminfo)"
if [ -n "$cg_kind" ]; then
  echo "  memory limit for every training launch: $limit_mib MiB (cgroup $cg_kind)"
else
  echo "  no memory cgroup here (cgroup v1/v2 not writable, no systemd-run): launches run unlimited"
fi

# --- Memory ------------------------------------------------------------------
if have memory; then
  blocks=16 width=4096
  params=$(awk -v k=$blocks -v w=$width 'BEGIN {printf "%.1f", k * (w * w + w) * 4 / 1048576}')
  unit=$(awk -v w=$width 'BEGIN {printf "%.1f", (w * w + w) * 4 / 1048576}')
  echo
  echo "-- memory: $blocks x Linear($width, $width) = $params MiB of parameters, Adam, 3 steps of 8 rows per rank --"
  rows=() resets=""
  for world in 2 3 4; do
    declare -A train=() start=()
    fb=""
    for s in ddp zero1 fsdp; do
      before=$(oom_kills)
      attempt_seconds=600 launch "$build" "$world" train "$s" "$blocks" "$width" 8 3 0
      rc=$?
      train[$s]=$(maxof train_mib <"$work/out") start[$s]=$(maxof startup_mib <"$work/out")
      resets+=" $(field hwm_reset <"$work/out")"
      if [ "$rc" != 0 ] || [ -z "${train[$s]}" ]; then
        [ "$(oom_kills)" != "$before" ] && train[$s]="OOM" || train[$s]="failed"
        echo "  $world ranks $s: ${train[$s]} (rc $rc, limit $limit_mib MiB): $(root_cause)"
        continue
      fi
      echo "  $world ranks $s: training peak ${train[$s]} MiB, start-up peak ${start[$s]:-?} MiB (max over ranks, minus base" \
        "$(maxof base_hwm_mib <"$work/out") MiB); the last step's forward + backward added $(maxof last_forward_backward_added_mib <"$work/out") MiB"
      [ "$s" = fsdp ] && fb=$(maxof last_forward_backward_added_mib <"$work/out")
      [ "$s" = fsdp ] && echo "    fsdp stats: $(grep -m1 '^units=' "$work/out")"
    done
    goal=$(awk -v p="$params" -v u="$unit" -v n=$world 'BEGIN {printf "%.0f", 4 * p / n + 2 * u + 64}')
    rows+=("$(printf '| %d | %s | %s | %s | %s | %s | %s / %s / %s | %s |' "$world" "${train[ddp]}" "${train[zero1]}" \
      "${train[fsdp]}" "$goal" "$(ratio "${train[fsdp]}" "$goal")" "${start[ddp]:-?}" "${start[zero1]:-?}" "${start[fsdp]:-?}" "${fb:-?}")")
    unset train start
  done
  echo
  echo "Training peak per rank (VmHWM after the reset, minus the base), MiB, max over ranks; goal: fsdp <= 4 x $params / N + 2 x $unit + 64 (VmHWM reset:$resets):"
  echo "| ranks | ddp MiB | zero1 MiB | fsdp MiB | fsdp goal MiB | fsdp/goal | start-up peak ddp / zero1 / fsdp MiB | fsdp: last forward + backward added MiB |"
  echo "|------:|------:|------:|------:|------:|------:|------:|------:|"
  printf '%s\n' "${rows[@]}"
fi

# --- Capacity ----------------------------------------------------------------
# Each attempt trains for minutes at this size (its time is the loopback
# traffic), so the search predicts: two small attempts (K and 2K) give each
# rank's peak (VmHWM: the larger of start-up and training) as a line in K; the
# predicted largest K that fits the limit (less 512 MiB for the launcher and
# the page cache it cannot drop) is tried, then K + K/8 (rounded up): up
# while both train, down while both fail, so that the answer is bracketed
# within 1/8 and the run past the limit is shown failing.
if have capacity; then
  echo
  echo "-- capacity: the most Linear(4096, 4096) blocks that train 2 Adam steps (4 rows per rank) at 4 ranks, limit $limit_mib MiB in all --"
  if [ -z "$cg_kind" ]; then
    echo "  skipped: no memory cgroup to keep the machine alive (see above)"
  else
    budget=${RANKWISE_BENCH_FSDP_CAPACITY_SECONDS:-600}
    attempt_seconds=${RANKWISE_BENCH_FSDP_ATTEMPT_SECONDS:-300}
    t0=$SECONDS
    peak=0
    attempt() {  # STRATEGY K -> 0 when it trained; peak: the sum over ranks of their peaks, MiB
      local before rc t=$SECONDS
      before=$(oom_kills)
      launch "$build" 4 train "$1" "$2" 4096 4 2 0
      rc=$?
      if [ "$rc" = 0 ] && grep -q '^samples_per_s=' "$work/out"; then
        peak=$(awk '/^(base_hwm_mib|startup_mib|train_mib)=/ {split($1, kv, "="); n = split(kv[2], v, ",");
                     for (i = 1; i <= n; i++) if (kv[1] == "base_hwm_mib") b[i] = v[i]; else if (v[i] > m[i]) m[i] = v[i]}
                   END {for (i in b) s += b[i] + m[i]; printf "%.0f", s}' "$work/out")
        echo "  $1 K=$2: trained ($((SECONDS - t)) s; peak per rank: start-up $(maxof startup_mib <"$work/out") MiB," \
          "training $(maxof train_mib <"$work/out") MiB above a base of $(maxof base_hwm_mib <"$work/out") MiB; all ranks $peak MiB)"
        return 0
      fi
      local why="rc $rc"
      [ "$(oom_kills)" != "$before" ] && why="OOM-killed in the cgroup"
      [ "$rc" = 124 ] && why="timed out after $attempt_seconds s"
      echo "  $1 K=$2: failed ($why, $((SECONDS - t)) s)"
      echo "    launcher: $(root_cause)"
      return 1
    }
    search() {  # STRATEGY K1 -> lo (the largest K that trained), hi (the smallest that failed; 0: none)
      lo=0 hi=0
      local k1=$2 p1 p2 k step
      attempt "$1" "$k1" || return
      p1=$peak
      attempt "$1" $((2 * k1)) || { hi=$((2 * k1)); lo=$k1; return; }
      p2=$peak
      k=$(awk -v l="$limit_mib" -v k1="$k1" -v p1="$p1" -v p2="$p2" \
        'BEGIN {b = (p2 - p1) / k1; k = k1 + (l - 512 - p1) / b; printf "%d", (k > 2 * k1 ? k : 2 * k1)}')
      echo "  $1: $(awk -v p1="$p1" -v p2="$p2" -v k1="$k1" 'BEGIN {printf "%.0f", (p2 - p1) / k1}') MiB per block over all ranks; predicted largest K: $k"
      lo=$((2 * k1))
      while [ $((SECONDS - t0)) -lt "$budget" ]; do
        if attempt "$1" "$k"; then lo=$k; else hi=$k; fi
        step=$(((k + 7) / 8))  # 1/8 of the size just tried
        if [ "$hi" -ne 0 ] && [ $((hi - lo)) -le "$step" ]; then return; fi
        if [ "$hi" -eq 0 ]; then k=$((lo + step)); else k=$((hi - step > lo ? hi - step : (lo + hi) / 2)); fi
      done
      echo "  $1: search stopped at the time budget ($budget s)"
    }
    search ddp 2
    ddp_lo=$lo ddp_hi=$hi
    search fsdp 4
    fsdp_lo=$lo fsdp_hi=$hi
    gib() { awk -v k="$1" 'BEGIN {printf "%.2f", k * (4096 * 4096 + 4096) * 4 / 1073741824}'; }
    echo
    echo "Capacity at 4 ranks, memory limit $limit_mib MiB for the whole job ($((SECONDS - t0)) s of search):"
    echo "| strategy | largest K that trained | its parameters GiB | smallest K that failed |"
    echo "|---|------:|------:|------:|"
    echo "| ddp | $ddp_lo | $(gib "$ddp_lo") | ${ddp_hi/#0/not tried} |"
    echo "| fsdp | $fsdp_lo | $(gib "$fsdp_lo") | ${fsdp_hi/#0/not tried} |"
    echo "  fsdp/ddp parameters: $(ratio "$fsdp_lo" "$ddp_lo") (goal >= 3)"
  fi
fi

# --- Speed against PyTorch's fully_shard -------------------------------------
legs=("$build")
[ -n "$other" ] && { [ -x "$other/bench/fsdp_bench" ] && legs+=("$other") || echo "  ($other/bench/fsdp_bench is not built: its leg is skipped)"; }
if have speed; then
  ref_py=""
  for candidate in "$(reference_python "$build")" ${other:+"$(reference_python "$other")"} "$here/../build-wheel/venv/bin/python"; do
    major=$("$candidate" -c 'import torch; print(torch.__version__.split(".")[0])' 2>/dev/null) || continue
    if [ "$major" -ge 2 ] && [ -x "$(dirname "$candidate")/torchrun" ]; then ref_py=$candidate; break; fi
  done
  spec="8 1024 64 15 5"
  echo
  echo "-- speed: 8 x Linear(1024, 1024), Adam, 2 ranks, batch 64 per rank, 5 untimed + 15 timed steps; $trials alternating trials --"
  [ -z "$ref_py" ] && echo "  PyTorch's fully_shard skipped: no Python with torch 2.x and torchrun (build-wheel/venv)"
  [ -n "$ref_py" ] && echo "  PyTorch: $("$ref_py" -c 'import torch; print(torch.__version__)') ($ref_py)"
  declare -A sps=() mem=() lo=()
  pt_sps=() pt_mem=() pt_lo=""
  for ((t = 1; t <= trials; t++)); do
    line="  trial $t:"
    for leg in "${legs[@]}"; do
      for s in fsdp fsdp-noprefetch ddp; do
        attempt_seconds=300 launch "$leg" 2 train "$s" $spec
        v=$(field samples_per_s <"$work/out")
        [ -z "$v" ] && { echo "  trial $t $leg $s: no result: $(root_cause)"; grep -m1 'what():' "$work/out" | sed 's/^ */    /'; v="failed"; }
        sps[$leg/$s]+=" $v"
        mem[$leg/$s]=$(maxof train_mib <"$work/out")/$(maxof base_hwm_mib <"$work/out")
        lo[$leg/$s]=$(field lo_bytes_per_step <"$work/out")
        [ "$v" = failed ] && mem[$leg/$s]=failed lo[$leg/$s]=failed
        line+=" $leg $s $v;"
      done
    done
    if [ -n "$ref_py" ]; then
      port=$("$ref_py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
      "$(dirname "$ref_py")/torchrun" --nproc-per-node 2 --master-addr 127.0.0.1 --master-port "$port" \
        "$here/fsdp_reference.py" $spec >"$work/out" 2>&1
      v=$(field samples_per_s <"$work/out")
      [ -z "$v" ] && { echo "  trial $t pytorch: no result:"; tail -5 "$work/out" | sed 's/^/    /'; }
      pt_sps+=("$v")
      pt_mem=$(maxof train_mib <"$work/out")/$(maxof base_hwm_mib <"$work/out")
      pt_lo=$(field lo_bytes_per_step <"$work/out")
      line+=" pytorch fully_shard $v"
    fi
    echo "$line (samples/s)"
  done
  per_trial() {  # A_LIST B_LIST -> "r1 r2 r3"
    local -a a=($1) b=($2)
    local out="" i
    for ((i = 0; i < ${#a[@]}; i++)); do out+="$(ratio "${a[$i]}" "${b[$i]:-}") "; done
    echo "${out% }"
  }
  med() { local m; m=$(tr ' ' '\n' <<<"$1" | grep -E '^[0-9.]+$' | median); echo "${m:-failed}"; }
  echo
  echo "Speed, 2 ranks (samples/s medians; ratios per trial, then median); memory: training peak / base VmHWM, MiB, max over ranks (last trial):"
  echo "| leg | rankwise fsdp | PyTorch fully_shard | rankwise/PyTorch (goal >= 1.0) | rankwise ddp | fsdp/ddp | fsdp no prefetch | prefetch on/off | fsdp memory | PyTorch memory |"
  echo "|---|------:|------:|------:|------:|------:|------:|------:|------:|------:|"
  pt_all="${pt_sps[*]:-}"
  for leg in "${legs[@]}"; do
    f=${sps[$leg/fsdp]} n=${sps[$leg/fsdp-noprefetch]} d=${sps[$leg/ddp]}
    vs_pt=$(per_trial "$f" "$pt_all") vs_ddp=$(per_trial "$f" "$d") vs_np=$(per_trial "$f" "$n")
    echo "| $leg | $(med "$f") | $(med "$pt_all") | $(med "$vs_pt") ($vs_pt) | $(med "$d") | $(med "$vs_ddp") ($vs_ddp) | $(med "$n") | $(med "$vs_np") ($vs_np) | ${mem[$leg/fsdp]} | ${pt_mem:-n/a} |"
  done
  echo
  echo "Loopback bytes per step, both ranks together (last trial; 2-rank traffic per rank = half):"
  for leg in "${legs[@]}"; do
    echo "  $leg: fsdp ${lo[$leg/fsdp]}, fsdp no prefetch ${lo[$leg/fsdp-noprefetch]}, ddp ${lo[$leg/ddp]}"
  done
  [ -n "$ref_py" ] && echo "  PyTorch fully_shard: $pt_lo"
fi

# --- The reduce phase: reduce-scatter vs all-gather, per leg -----------------
if have reduce; then
  echo
  echo "-- reduce phase: the engine's collectives on one unit's buffer, 2 ranks (mean per call; loopback bytes of both ranks per call) --"
  echo "| leg | buffer MiB | reduce-scatter is all_reduce | all_gather ms | reduce_scatter ms | all_reduce ms | reduce_scatter / all_gather time | all_gather bytes | reduce_scatter bytes | bytes ratio |"
  echo "|---|------:|---|------:|------:|------:|------:|------:|------:|------:|"
  for leg in "${legs[@]}"; do
    for spec in "1049600 20" "16781312 5"; do
      attempt_seconds=300 launch "$leg" 2 collectives $spec
      ag=$(field all_gather_ms <"$work/out") rs=$(field reduce_scatter_ms <"$work/out") ar=$(field all_reduce_ms <"$work/out")
      agb=$(field all_gather_lo_bytes <"$work/out") rsb=$(field reduce_scatter_lo_bytes <"$work/out")
      [ -z "$ag" ] && echo "  $leg collectives $spec: no result: $(root_cause)"
      echo "| $leg | $(field buffer_mib <"$work/out") | $(field reduce_scatter_is_all_reduce <"$work/out") | $ag | $rs | $ar | $(ratio "$rs" "$ag") | $agb | $rsb | $(ratio "$rsb" "$agb") |"
    done
  done
fi
echo
echo "  load average at end: $(load); compilers running: $(compiling)"
exit 0
