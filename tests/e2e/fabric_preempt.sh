#!/usr/bin/env bash
# fabric_preempt.sh RUN PROGRAM CKPT_TOOL STRATEGY WORLD WORKDIR MODE [every-process]:
# preemption of a Fabric run (torch_fabric_strategy: Adam, a tracked StepLR,
# dropout per rank, --accumulate 2, checkpoints every 5 steps and at epoch
# ends; 30 epochs). Run A is uninterrupted. Run B is a chain of jobs: each
# is sent SIGTERM at a random moment once it has trained (a checkpoint newer
# than the one it started from exists), must exit 75 having saved its
# current step, and the next one resumes with the same command, until a
# job ends with 0. B's last checkpoint must equal A's byte for byte: no
# optimizer step lost, none trained twice. With `async` saves run in the
# background (--checkpoint-async), so a SIGTERM often falls during one.
# With `every-process` SIGTERM goes to every worker, then the launcher, as
# Slurm and systemd send it: the launcher's forwarded copy must not count as
# a worker's second SIGTERM (which ends it without a save).
set -uo pipefail
run=$1; program=$2; ckpt=$3; strategy=$4; world=$5; work=$6; mode=${7:-}; targets=${8:-launcher}
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work"; mkdir -p "$work/A" "$work/B"
epochs=30
flags=(--strategy "$strategy" --accumulate 2)
[ "$mode" = async ] && flags+=(--checkpoint-async)
out=$("$run" --nproc-per-node "$world" "$program" "$work/A" 0 "$epochs" --checkpoint-dir "$work/A/ckpt" \
  "${flags[@]}" 2>&1) || fail "run A: $out"
grep -q "done at step 120" <<<"$out" || fail "run A did not end at step 120: $out"

latest() { cat "$work/B/ckpt/latest" 2>/dev/null; }
preemptions=0
for job in 1 2 3 4 5 6; do
  before=$(latest)
  log="$work/B/job$job.log"
  "$run" --nproc-per-node "$world" --grace-period 30 "$program" "$work/B" 0 "$epochs" \
    --checkpoint-dir "$work/B/ckpt" "${flags[@]}" >"$log" 2>&1 &
  pid=$!
  if [ "$job" -lt 6 ]; then
    # Until this job has trained, 1 to 3 new checkpoints (or has ended), then
    # 0-19 ms more: a random step, often during a save. Counted in
    # checkpoints, not seconds: a fast machine trains the whole run in one.
    want=$((1 + RANDOM % 3)); seen=0; last=$before
    while kill -0 "$pid" 2>/dev/null && [ "$seen" -lt "$want" ]; do
      now=$(latest)
      [ "$now" != "$last" ] && { seen=$((seen + 1)); last=$now; }
      sleep 0.005
    done
    sleep "0.0$(printf '%02d' $((RANDOM % 20)))"
    if [ "$targets" = every-process ]; then
      kill -TERM $(pgrep -P "$pid") "$pid" 2>/dev/null
    else
      kill -TERM "$pid" 2>/dev/null
    fi
  fi
  wait "$pid"; rc=$?
  # Training ended before the signal came: the job is done.
  [ "$rc" = 143 ] && grep -q "done at step 120" "$log" && rc=0
  echo "job $job: exit $rc, $(grep -o -m1 -E 'every rank saved step [0-9]+' "$log" || echo 'no preemption save')"
  case $rc in
    0) break ;;
    75) grep -q "exit code 75" "$log" || fail "job $job exited 75 without the launcher's line: $(cat "$log")"
        preemptions=$((preemptions + 1)) ;;
    *) fail "job $job exited $rc (expected 75 after SIGTERM, or 0): $(cat "$log")" ;;
  esac
done
[ "$rc" = 0 ] || fail "run B had not finished after $job jobs"
grep -q "done at step 120" "$log" || fail "run B's last job did not end at step 120: $(cat "$log")"
[ "$preemptions" -ge 2 ] || fail "only $preemptions of run B's jobs were preempted mid-run"
last=$(cat "$work/A/ckpt/latest")
[[ "$last" == "$(latest)" ]] || fail "the runs' latest checkpoints differ: $last, $(latest)"
"$ckpt" diff "$work/A/ckpt/$last" "$work/B/ckpt/$last" || fail "run B's $last differs from run A's"
echo "PASS ($preemptions preemptions)"
