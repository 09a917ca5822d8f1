#!/usr/bin/env bash
# multinode_netns.sh RUN PROGRAM [MAIN_JOB [RESUME_TRAINER]]
#
# Two "nodes" on one machine (netns_nodes.sh: two network namespaces joined by
# a veth pair, 10.231.0.1 <-> 10.231.0.2). In each namespace one
# `rankwise-run --nnodes 2 --node-rank {0,1} --nproc-per-node 2` runs PROGRAM
# (tests/programs/torch_world_probe). Checks:
#   1. both launchers exit 0; world size 4, ranks 0-1 on node 0 and 2-3 on
#      node 1, the all_reduce sums across nodes; node 0 uses the route to
#      MASTER_ADDR for Gloo, node 1 uses --iface (GLOO_SOCKET_IFNAME);
#  1b. torchrun's Slurm line (--rdzv-id J --rdzv-backend c10d --rdzv-endpoint,
#      no --node-rank), the same on both nodes, gives the same job; a launcher
#      of job J2 sent to J's endpoint meanwhile is refused naming both ids;
#   2. node 1 never arrives: node 0 fails within the rendezvous timeout and
#      names node rank 1;
#   3. node 0 never arrives: node 1 fails within the timeout, naming node 0's store;
#   4. (with MAIN_JOB, examples/fashion_mnist) the main job on 2 nodes x 2 ranks
#      prints the same epoch line (loss, accuracy, F1) as on one node x 4 ranks;
#   5. (with RESUME_TRAINER, tests/programs/torch_resume_trainer) rank 3 on
#      node 1 SIGKILLs itself mid epoch 2: with --max-restarts 1 both launchers
#      stop their workers within 10 s, all 4 ranks restart together and resume
#      from the checkpoint, ending bit for bit where an uninterrupted run ends;
#      without restarts both launchers exit 1 naming the same root cause.
# Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN); otherwise it prints why and exits
# 77, which ctest reports as skipped (SKIP_RETURN_CODE 77). The namespaces are
# removed on exit (trap).
set -uo pipefail
run=$1; program=$2; main_job=${3:-}; trainer=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/netns_nodes.sh"  # ns0, ns1, work, fail, skip; the namespaces are up
port=29611

common=(--nnodes 2 --nproc-per-node 2 --master-addr 10.231.0.1 --master-port "$port"
        --tag '[{node_rank}/{rank}] ')

# probe_job LABEL NODE0_ARGS -- NODE1_ARGS: a 2-node job of 4 ranks running
# PROGRAM (the probe), each node's launcher with its own arguments; both exit
# 0 and every rank prints its probe line (world size 4, the all_reduce sum).
probe_job() {
  local label=$1 a=() b=() pid0 pid1 rc0 rc1 r node local_rank
  shift
  while [ "$1" != -- ]; do a+=("$1"); shift; done
  shift; b=("$@")
  timeout 120 ip netns exec "$ns0" "$run" "${a[@]}" --rendezvous-timeout 60 \
    --tag '[{node_rank}/{rank}] ' "$program" >"$work/node0.out" 2>&1 &
  pid0=$!
  timeout 120 ip netns exec "$ns1" "$run" "${b[@]}" --rendezvous-timeout 60 \
    --tag '[{node_rank}/{rank}] ' "$program" >"$work/node1.out" 2>&1 &
  pid1=$!
  [ -z "${during:-}" ] || "$during"
  wait "$pid0"; rc0=$?
  wait "$pid1"; rc1=$?
  [ "$rc0" = 0 ] || fail "$label: node 0 exited $rc0"
  [ "$rc1" = 0 ] || fail "$label: node 1 exited $rc1"
  cat "$work/node0.out" "$work/node1.out"
  for r in 0 1 2 3; do
    node=$((r / 2)); local_rank=$((r % 2))
    grep -qx "\[$node/$r\] probe rank $r local_rank $local_rank node $node world 4 sum 6" \
      "$work/node$node.out" || fail "$label: rank $r: probe line on node $node"
    grep -Eq "^\[0/0\]   rank $r \| local rank $local_rank \| host .* \| pid [0-9]+ \| device cpu \| physical GPU -$" \
      "$work/node0.out" || fail "$label: rank $r: header line on rank 0"
  done
  [ "$(grep -c 'rankwise .*world size: 4 | backend: gloo$' "$work/node0.out")" = 1 ] \
    || fail "$label: header with world size 4, once"
  ! grep -q 'world size' "$work/node1.out" || fail "$label: node 1 printed a header"
  echo "ok: $label: 2 nodes x 2 ranks, world size 4"
}

# 1. A 2-node job of 4 ranks (node 1's Gloo on --iface).
probe_job "--master-addr/--master-port" --nnodes 2 --nproc-per-node 2 --master-addr 10.231.0.1 \
  --master-port "$port" --node-rank 0 -- --nnodes 2 --nproc-per-node 2 --master-addr 10.231.0.1 \
  --master-port "$port" --node-rank 1 --iface veth1

# 1b. The Slurm recipe's line, the same on both nodes (node ranks by arrival:
# the node whose address the endpoint is hosts the store and is node 0): the
# same job. Meanwhile a launcher of job J2 sent to J's endpoint is refused,
# naming both ids, and J goes on.
slurm=(--nnodes 2 --nproc-per-node 2 --rdzv-id J --rdzv-backend c10d
       --rdzv-endpoint "10.231.0.1:$((port + 5))")
intruder() {
  timeout 60 ip netns exec "$ns1" "$run" "${slurm[@]/#J/J2}" "$program" >"$work/j2.out" 2>&1
  echo "rc=$?" >>"$work/j2.out"
}
during=intruder probe_job "Slurm line" "${slurm[@]}" -- "${slurm[@]}"
cat "$work/j2.out"
grep -q "^rc=2$" "$work/j2.out" || fail "job J2's launcher did not exit 2"
grep -q "this node's --rdzv-id 'J2' differs from node 0's 'J' at 10.231.0.1:$((port + 5))" \
  "$work/j2.out" || fail "job J2's launcher was not refused naming both ids"

# lonely_node NS NODE_RANK EXPECTED: that node alone, --rendezvous-timeout 3:
# it must exit 1 within 20 s (the timeout, plus starting libtorch, which takes
# 2-7 s for the 2.x wheel on a loaded 2-core machine; the default timeout
# would be 300 s) with a message matching EXPECTED (grep pattern).
lonely_node() {
  local ns=$1 node=$2 expected=$3 start rc elapsed
  start=$(date +%s.%N)
  timeout 60 ip netns exec "$ns" "$run" "${common[@]}" --node-rank "$node" --rendezvous-timeout 3 \
    "$program" >"$work/alone$node.out" 2>&1
  rc=$?
  elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  cat "$work/alone$node.out"
  [ "$rc" = 1 ] || fail "lonely node $node exited $rc, expected 1"
  grep -q "$expected" "$work/alone$node.out" || fail "node $node's error does not say: $expected"
  awk -v e="$elapsed" 'BEGIN { exit !(e < 20) }' || fail "node $node took ${elapsed}s to fail (timeout 3 s)"
  echo "ok: node $node alone failed after ${elapsed}s: $expected"
}

# 2. Node 1 never arrives: node 0 gives up after --rendezvous-timeout 3, naming node rank 1.
lonely_node "$ns0" 0 'node rank(s) 1 of 2 never arrived'

# 3. Node 0 never arrives: node 1 cannot reach the store.
lonely_node "$ns1" 1 "cannot reach node 0's rendezvous store at 10.231.0.1:$port"

# 4. The main job: 2 nodes x 2 ranks reach the same numbers as 1 node x 4 ranks.
if [ -n "$main_job" ]; then
  job=(--epochs 1 --limit 2000 --seed 3)
  timeout 200 "$run" --nproc-per-node 4 --tag '[{node_rank}/{rank}] ' "$main_job" "${job[@]}" \
    --checkpoint-dir "$work/single" >"$work/single.out" 2>&1 || fail "single-node main job"
  timeout 200 ip netns exec "$ns0" "$run" "${common[@]}" --node-rank 0 --rendezvous-timeout 60 \
    "$main_job" "${job[@]}" --checkpoint-dir "$work/multi" >"$work/main0.out" 2>&1 &
  pid0=$!
  timeout 200 ip netns exec "$ns1" "$run" "${common[@]}" --node-rank 1 --rendezvous-timeout 60 \
    --iface veth1 "$main_job" "${job[@]}" --checkpoint-dir "$work/multi" >"$work/main1.out" 2>&1 &
  pid1=$!
  wait "$pid0" || fail "main job node 0"
  wait "$pid1" || fail "main job node 1"
  single=$(grep -o 'epoch 1/1 | train loss .* over 2000 samples | test accuracy .* over 2000 samples' "$work/single.out")
  multi=$(grep -o 'epoch 1/1 | train loss .* over 2000 samples | test accuracy .* over 2000 samples' "$work/main0.out")
  echo "1 node x 4:  $single"
  echo "2 nodes x 2: $multi"
  [ -n "$single" ] && [ "$single" = "$multi" ] || fail "main job differs between 1 node and 2 nodes"
  grep -q 'at world size 4$' "$work/main0.out" || fail "main job world size on 2 nodes"
  echo "ok: main job on 2 nodes equals 1 node"
fi

# stamped FILE: copies stdin to FILE, each line after its arrival time (s).
stamped() { while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done >"$1"; }
# first_time FILE PATTERN: the arrival time of FILE's first line matching PATTERN.
first_time() { grep -m1 -- "$2" "$1" | cut -d' ' -f1; }

# 5. A rank on node 1 dies: both nodes stop, restart together and resume.
if [ -n "$trainer" ]; then
  timeout 200 "$run" --nproc-per-node 4 "$trainer" adamw "$work/rA" >"$work/rA.out" 2>&1 \
    || fail "uninterrupted 4-rank run"
  kill_at=11  # 7 steps per epoch at 4 ranks: mid epoch 2, after the checkpoint of step 8
  two_nodes() {  # two_nodes DIR [OPTION...]: both nodes; output in DIR.node{0,1}
    local dir=$1; shift
    ( timeout 200 ip netns exec "$ns0" "$run" "${common[@]}" --node-rank 0 --rendezvous-timeout 60 \
        "$@" "$trainer" adamw "$dir" "$kill_at" 2>&1 | stamped "$dir.node0" ) &
    local p0=$!
    ( timeout 200 ip netns exec "$ns1" "$run" "${common[@]}" --node-rank 1 --rendezvous-timeout 60 \
        --iface veth1 "$@" "$trainer" adamw "$dir" "$kill_at" 2>&1 | stamped "$dir.node1" ) &
    local p1=$!
    wait "$p0"; rc0=$?
    wait "$p1"; rc1=$?
    cat "$dir.node0" "$dir.node1"
  }
  export RANKWISE_JOB_KEY=netns-group-$$
  two_nodes "$work/rB" --max-restarts 1
  [ "$rc0" = 0 ] && [ "$rc1" = 0 ] || fail "restarted job: node 0 exited $rc0, node 1 $rc1"
  killed=$(stat -c %.9Y "$work/rB/killed") || fail "rank 3 never killed itself"
  for node in 0 1; do
    t=$(first_time "$work/rB.node$node" "attempt 0 failed (.*rank 3.*was killed by SIGKILL (signal 9)); restarting (1/1) with every node")
    [ -n "$t" ] || fail "node $node did not restart for rank 3's death"
    awk -v a="$killed" -v b="$t" 'BEGIN { exit !(b - a < 10) }' \
      || fail "node $node restarted $(awk -v a="$killed" -v b="$t" 'BEGIN { print b - a }') s after the kill"
    echo "ok: node $node stopped its workers and restarted $(awk -v a="$killed" -v b="$t" 'BEGIN { printf "%.2f", b - a }') s after rank 3 died"
  done
  grep -q "resumed at step" "$work/rB.node0" || fail "the restarted job did not resume"
  "${RANKWISE_PYTHON:-/usr/bin/python3}" "$here/compare_checkpoints.py" "$work/rA/final.pt" "$work/rB/final.pt" \
    || fail "the job restarted on 2 nodes differs from the uninterrupted run"
  echo "ok: restarted together on 2 nodes, ends equal to the uninterrupted run"

  two_nodes "$work/rC"
  [ "$rc0" = 1 ] && [ "$rc1" = 1 ] || fail "failed job: node 0 exited $rc0, node 1 $rc1 (expected 1, 1)"
  cause0=$(grep -o 'root cause (first failure): .*' "$work/rC.node0")
  cause1=$(grep -o 'root cause (first failure): .*' "$work/rC.node1")
  echo "node 0: $cause0"; echo "node 1: $cause1"
  grep -q "rank 3 (local rank 1) on host .* (node 1) was killed by SIGKILL" <<<"$cause0" \
    || fail "node 0 does not name rank 3's death"
  [ "$cause0" = "$cause1" ] || fail "the two launchers name different root causes"
  echo "ok: without restarts both launchers exit 1 naming rank 3"
fi
echo PASS
