#!/usr/bin/env bash
# elastic_netns.sh RUN MAIN_JOB: elastic membership (--nnodes 1:2
# --rdzv-backend c10d) on two namespace nodes (netns_nodes.sh), A ($ns0, which
# hosts the store) and B ($ns1), running the main job (examples/fashion_mnist,
# epoch-end checkpoints in a directory both see, --resume):
#   1. A alone: round 0 closes after the last-call timeout with 1 node, world
#      size 2 (2 ranks);
#   2. B joins once A has finished epoch 1: A stops its workers, round 1 has 2
#      nodes, world size 4, and the job resumes from its epoch-end checkpoint;
#   3. after an epoch at world size 4, B's launcher is killed with SIGKILL:
#      round 2 has A alone (world size 2, B named as gone), the job resumes
#      again (once B was silent for 5 s: keep_alive_interval=1 x
#      keep_alive_max_attempt=5) and finishes every epoch; A exits 0.
# Each round's membership and world size are printed once (on A). Then, on
# loopback: fewer than MIN nodes is a clear error after the rendezvous timeout.
set -uo pipefail
run=$1; job=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/netns_nodes.sh"  # ns0, ns1, work, fail, skip; the namespaces are up
port=29621
elastic=(--nnodes 1:2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "10.231.0.1:$port"
         --rdzv-id elastic-test --max-restarts 3
         --rdzv-conf last_call_timeout=2,keep_alive_interval=1,keep_alive_max_attempt=5
         --rendezvous-timeout 60)
args=(--epochs 8 --limit 12000 --checkpoint-dir "$work/ckpt" --resume --progress off)

# wait_for FILE REGEX SECONDS: until a line of FILE matches (grep -E).
wait_for() {
  local until=$((SECONDS + $3))
  while ((SECONDS < until)); do
    grep -Eq "$2" "$1" 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}
count() { grep -Ec "$2" "$1"; }

start=$SECONDS
timeout 280 ip netns exec "$ns0" "$run" "${elastic[@]}" "$job" "${args[@]}" >"$work/a.out" 2>&1 &
pid_a=$!
wait_for "$work/a.out" 'rendezvous round 0:' 30 || fail "A: round 0 never closed"
waited=$((SECONDS - start))
((waited >= 2)) || fail "A: round 0 closed after ${waited} s, before the 2 s last call"
wait_for "$work/a.out" 'epoch 1/8 \|' 90 || fail "A: no epoch 1 at world size 2"
timeout 250 ip netns exec "$ns1" "$run" "${elastic[@]}" --iface veth1 "$job" "${args[@]}" \
  >"$work/b.out" 2>&1 &
pid_b=$!
wait_for "$work/a.out" 'at world size 4$' 120 || fail "no epoch at world size 4 after B joined"
# timeout's child is B's launcher (ip netns exec execs it).
pkill -KILL -P "$pid_b" || fail "B's launcher was gone before it was killed"
wait "$pid_a"; rc_a=$?
wait "$pid_b" 2>/dev/null
cat "$work/a.out"
[ "$rc_a" = 0 ] || fail "A exited $rc_a"
host_a='node 0 \(host [^)]+\)'
[ "$(count "$work/a.out" "rendezvous round 0: 1 node \($host_a\), world size 2; this is node 0$")" = 1 ] \
  || fail "A: round 0's line (1 node, world size 2), once"
[ "$(count "$work/a.out" "rendezvous round 1: 2 nodes \($host_a, node 1 \(host [^)]+\)\), world size 4; this is node 0$")" = 1 ] \
  || fail "A: round 1's line (2 nodes, world size 4), once"
[ "$(count "$work/a.out" "rendezvous round 2: 1 node \($host_a\), world size 2; this is node 0; left since round 1: node 1 \(host [^)]+\)$")" = 1 ] \
  || fail "A: round 2's line (1 node, world size 2, B named), once"
[ "$(count "$work/a.out" '^rankwise-run: rendezvous round ')" = 3 ] || fail "A: more than three rounds"
grep -q 'a node is waiting to join the job; stopping every worker' "$work/a.out" \
  || fail "A did not say why round 0 ended"
grep -Eq 'round 1 failed \(.*\); restarting \(1/3\) in a new rendezvous round' "$work/a.out" \
  || fail "A: round 1's failure was not counted as restart 1 of 3"
# The job resumed from an epoch-end checkpoint at each new round, and ended.
[ "$(count "$work/a.out" '^\[rank0\]: resumed from .*checkpoint-[0-9]+\.pt at step [0-9]+ \(epoch [2-8], 0 samples into it')" = 2 ] \
  || fail "the job did not resume from an epoch-end checkpoint in rounds 1 and 2"
grep -q 'rankwise .* world size: 4 | backend: gloo$' "$work/a.out" || fail "no world-size-4 header"
grep -Eq '^\[rank0\]: epoch 8/8 \| .* at world size 2$' "$work/a.out" \
  || fail "the job did not finish its last epoch at world size 2"
grep -q 'rendezvous round 1: 2 nodes .* this is node 1$' "$work/b.out" || fail "B: round 1's line"
echo "ok: rounds 0 (1 node), 1 (2 nodes), 2 (1 node) with resumes"

# Fewer than MIN nodes: a clear error after the rendezvous timeout.
lport=$((port + 1))
out=$(timeout 60 "$run" --nnodes 2:3 --nproc-per-node 1 --rdzv-backend c10d \
        --rdzv-endpoint "127.0.0.1:$lport" --rendezvous-timeout 3 /bin/true 2>&1)
rc=$?
echo "$out"
[ "$rc" = 1 ] || fail "fewer than MIN nodes: exit $rc, expected 1"
grep -q 'elastic rendezvous round 0 timed out after 3 s at 127.0.0.1:'"$lport"': 1 of the 2 node(s) needed (--nnodes 2:3) joined' \
  <<<"$out" || fail "fewer than MIN nodes: the message"
echo PASS
