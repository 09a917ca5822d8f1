#!/usr/bin/env bash
# multinode_netns.sh RUN PROGRAM [MAIN_JOB]
#
# Two "nodes" on one machine: two network namespaces created here, joined by a
# veth pair (10.231.0.1/24 <-> 10.231.0.2/24, addresses that exist only inside
# these namespaces; nothing is sent anywhere else). In each namespace one
# `rankwise-run --nnodes 2 --node-rank {0,1} --nproc-per-node 2` runs PROGRAM
# (tests/programs/torch_world_probe). Checks:
#   1. both launchers exit 0; world size 4, ranks 0-1 on node 0 and 2-3 on
#      node 1, the all_reduce sums across nodes; node 0 uses the route to
#      MASTER_ADDR for Gloo, node 1 uses --iface (GLOO_SOCKET_IFNAME);
#   2. node 1 never arrives: node 0 fails within the rendezvous timeout and
#      names node rank 1;
#   3. node 0 never arrives: node 1 fails within the timeout, naming node 0's store;
#   4. (with MAIN_JOB, examples/fashion_mnist) the main job on 2 nodes x 2 ranks
#      prints the same epoch line (loss, accuracy, F1) as on one node x 4 ranks.
# Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN); otherwise it prints why and exits
# 77, which ctest reports as skipped (SKIP_RETURN_CODE 77). The namespaces are
# removed on exit (trap).
set -uo pipefail
run=$1; program=$2; main_job=${3:-}
tag=rw$$
ns0=${tag}n0; ns1=${tag}n1
work=$(mktemp -d "${TMPDIR:-/tmp}/rankwise-netns-XXXXXX")
port=29611
export OMP_NUM_THREADS=1

cleanup() {
  ip netns del "$ns0" 2>/dev/null
  ip netns del "$ns1" 2>/dev/null
  rm -rf "$work"
}
skip() { echo "SKIP: $*"; rm -rf "$work"; exit 77; }
fail() { echo "FAIL: $*"; for f in "$work"/*.out; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done; exit 1; }

command -v ip >/dev/null || skip "the 'ip' command (iproute2) is not installed"
if ! err=$(ip netns add "$ns0" 2>&1); then
  skip "cannot create a network namespace ('ip netns add' failed: $err); run as root to test multi-node"
fi
trap cleanup EXIT
ip netns add "$ns1" || fail "ip netns add $ns1"
# The veth pair is created inside ns0 with its peer moved to ns1: the host's
# own namespace is never touched.
ip -n "$ns0" link add veth0 type veth peer name veth1 netns "$ns1" || fail "veth pair"
ip -n "$ns0" addr add 10.231.0.1/24 dev veth0 || fail "address ns0"
ip -n "$ns1" addr add 10.231.0.2/24 dev veth1 || fail "address ns1"
for ns in "$ns0" "$ns1"; do
  ip -n "$ns" link set lo up || fail "lo up in $ns"
done
ip -n "$ns0" link set veth0 up || fail "veth0 up"
ip -n "$ns1" link set veth1 up || fail "veth1 up"

common=(--nnodes 2 --nproc-per-node 2 --master-addr 10.231.0.1 --master-port "$port"
        --tag '[{node_rank}/{rank}] ')

# 1. A 2-node job of 4 ranks.
timeout 120 ip netns exec "$ns0" "$run" "${common[@]}" --node-rank 0 --rendezvous-timeout 60 \
  "$program" >"$work/node0.out" 2>&1 &
pid0=$!
timeout 120 ip netns exec "$ns1" "$run" "${common[@]}" --node-rank 1 --rendezvous-timeout 60 \
  --iface veth1 "$program" >"$work/node1.out" 2>&1 &
pid1=$!
wait "$pid0"; rc0=$?
wait "$pid1"; rc1=$?
[ "$rc0" = 0 ] || fail "node 0 exited $rc0"
[ "$rc1" = 0 ] || fail "node 1 exited $rc1"
cat "$work/node0.out" "$work/node1.out"
for r in 0 1 2 3; do
  node=$((r / 2)); local_rank=$((r % 2))
  grep -qx "\[$node/$r\] probe rank $r local_rank $local_rank node $node world 4 sum 6" \
    "$work/node$node.out" || fail "rank $r: probe line on node $node"
  grep -Eq "^\[0/0\]   rank $r \| local rank $local_rank \| host .* \| pid [0-9]+ \| device cpu \| physical GPU -$" \
    "$work/node0.out" || fail "rank $r: header line on rank 0"
done
[ "$(grep -c 'rankwise .*world size: 4 | backend: gloo$' "$work/node0.out")" = 1 ] \
  || fail "header with world size 4, once"
! grep -q 'world size' "$work/node1.out" || fail "node 1 printed a header"
echo "ok: 2 nodes x 2 ranks, world size 4"

# lonely_node NS NODE_RANK EXPECTED: that node alone, --rendezvous-timeout 3:
# it must exit 1 within 10 s with a message matching EXPECTED (grep pattern).
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
  awk -v e="$elapsed" 'BEGIN { exit !(e < 10) }' || fail "node $node took ${elapsed}s to fail (timeout 3 s)"
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
  grep -q 'on 4 ranks$' "$work/main0.out" || fail "main job world size on 2 nodes"
  echo "ok: main job on 2 nodes equals 1 node"
fi
echo PASS
