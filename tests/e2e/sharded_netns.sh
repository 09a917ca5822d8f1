#!/usr/bin/env bash
# sharded_netns.sh RUN WORKER
#
# Sharded checkpoints on two "nodes" (two network namespaces, netns_nodes.sh),
# one `rankwise-run --nnodes 2 --node-rank {0,1}` in each, running WORKER
# (tests/programs/torch_sharded_checkpoint: 10 tensors in 5 dtypes, row-wise,
# flat and replicated; its check compares every value with the formula):
#   a. node-local disks: each node's launcher runs in a mount namespace of its
#      own (ip netns exec makes one) where $work/disk<N> is bind-mounted at
#      $work/root, so the same path is another disk on each node. Saved by
#      2 nodes x 2 ranks: node 0's disk holds __0/__1, node 1's __2/__3, the
#      manifests are the same bytes and name both storage nodes. Loaded by
#      load_sharded_collective at 2 nodes x 1 rank (rank 1 on node 1 needs
#      rows that are on node 0's disk, and the replicated tensor): identical
#      values. Every rank of node 1 SIGKILLs itself at the first byte of a
#      new save: both launchers fail, nothing is published on either disk,
#      the previous checkpoint still loads.
#   b. one shared directory: saved by 2 x 2 (one storage node in the
#      manifest), loaded at 2 x 1 by load_sharded_collective and load_sharded.
# Needs root; otherwise exit 77 (skipped).
set -uo pipefail
run=$1; worker=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/netns_nodes.sh"  # ns0, ns1, work, fail, skip; the namespaces are up
port=29617

# two_nodes NAME NPROC DISK ARGS...: both nodes' launchers, NPROC ranks each;
# with DISK=yes node N's $work/diskN is mounted at $work/root first. Output in
# $work/NAME.node{0,1}.out, exit codes in rc0 and rc1. FAULT_NODE1 (if set)
# is RANKWISE_CHECKPOINT_FAULT for node 1's ranks.
two_nodes() {
  local name=$1 nproc=$2 disk=$3; shift 3
  local pids=() node ns mount env
  for node in 0 1; do
    ns=$ns0; [ "$node" = 1 ] && ns=$ns1
    mount=""; [ "$disk" = yes ] && mount="mount --bind '$work/disk$node' '$work/root' &&"
    env=""; [ "$node" = 1 ] && [ -n "${FAULT_NODE1:-}" ] && env="RANKWISE_CHECKPOINT_FAULT=$FAULT_NODE1"
    timeout 120 ip netns exec "$ns" sh -c "$mount exec env $env \"\$@\"" sh "$run" --nnodes 2 \
      --nproc-per-node "$nproc" --master-addr 10.231.0.1 --master-port "$port" --node-rank "$node" \
      --rendezvous-timeout 60 --tag "[$node/{rank}] " $([ "$node" = 1 ] && echo --iface veth1) \
      "$worker" "$@" >"$work/$name.node$node.out" 2>&1 &
    pids+=($!)
  done
  wait "${pids[0]}"; rc0=$?
  wait "${pids[1]}"; rc1=$?
}
checked() {  # checked NAME COUNT: both nodes exited 0 and COUNT ranks checked 17 entries
  [ "$rc0" = 0 ] && [ "$rc1" = 0 ] || fail "$1: node 0 exited $rc0, node 1 $rc1"
  local n; n=$(cat "$work/$1".node*.out | grep -c 'checked 17 entries')
  [ "$n" = "$2" ] || fail "$1: $n ranks checked 17 entries, expected $2"
}

# a. Node-local disks.
mkdir -p "$work/root" "$work/disk0" "$work/disk1"
two_nodes save_a 2 yes save "$work/root/ckpt" rankwise 0
[ "$rc0" = 0 ] && [ "$rc1" = 0 ] || fail "node-local save: node 0 exited $rc0, node 1 $rc1"
[ "$(cd "$work/disk0/ckpt" && ls *.distcp | tr '\n' ' ')" = "__0_0.distcp __1_0.distcp " ] || fail "node 0's disk: $(ls -a "$work/disk0/ckpt")"
[ "$(cd "$work/disk1/ckpt" && ls *.distcp | tr '\n' ' ')" = "__2_0.distcp __3_0.distcp " ] || fail "node 1's disk: $(ls -a "$work/disk1/ckpt")"
cmp -s "$work/disk0/ckpt/.rankwise-manifest.json" "$work/disk1/ckpt/.rankwise-manifest.json" || fail "the manifests differ"
"${RANKWISE_PYTHON:-/usr/bin/python3}" - "$work/disk0/ckpt/.rankwise-manifest.json" <<'PY' || fail "manifest nodes"
import json, sys
nodes = json.load(open(sys.argv[1]))["nodes"]
assert [n["ranks"] for n in nodes] == [[0, 1], [2, 3]], nodes
assert nodes[0]["files"] == ["__0_0.distcp", "__1_0.distcp"] and nodes[1]["files"] == ["__2_0.distcp", "__3_0.distcp"], nodes
assert nodes[0]["leader"] == 0 and nodes[1]["leader"] in (2, 3), nodes
PY
echo "ok: node-local save on 2 nodes x 2: each disk holds its node's files, the manifests agree"
two_nodes load_a 1 yes check-collective "$work/root/ckpt" rankwise 0
checked load_a 2
grep -q 'were sent to it by' "$work/load_a.node0.out" || fail "no note of bytes sent across nodes"
echo "ok: loaded at 2 nodes x 1 across the disks: $(grep -o 'were sent to it by.*' "$work/load_a.node0.out")"
before=$(cat "$work/disk0/ckpt/.rankwise-manifest.json")
FAULT_NODE1=kill_at_byte=1 two_nodes kill_a 2 yes save "$work/root/ckpt" rankwise 1
[ "$rc0" != 0 ] && [ "$rc1" != 0 ] || fail "killed save: node 0 exited $rc0, node 1 $rc1 (expected failures)"
for d in 0 1; do
  [ "$(cat "$work/disk$d/ckpt/.rankwise-manifest.json")" = "$before" ] || fail "disk $d: a new checkpoint was published"
done
two_nodes reload_a 1 yes check-collective "$work/root/ckpt" rankwise 0
checked reload_a 2
echo "ok: node 1's ranks killed during a save: nothing published on either disk, the previous checkpoint loads"

# b. One shared directory.
mkdir -p "$work/shared"
two_nodes save_b 2 no save "$work/shared/ckpt" rankwise 2
[ "$rc0" = 0 ] && [ "$rc1" = 0 ] || fail "shared save: node 0 exited $rc0, node 1 $rc1"
"${RANKWISE_PYTHON:-/usr/bin/python3}" -c "
import json, sys
nodes = json.load(open(sys.argv[1]))['nodes']
assert [n['ranks'] for n in nodes] == [[0, 1, 2, 3]], nodes
" "$work/shared/ckpt/.rankwise-manifest.json" || fail "shared manifest nodes"
two_nodes load_b 1 no check-collective "$work/shared/ckpt" rankwise 2
checked load_b 2
! grep -q 'were sent to it by' "$work/load_b.node0.out" || fail "bytes were sent although every rank sees the files"
two_nodes plain_b 1 no check "$work/shared/ckpt" rankwise 2
checked plain_b 2
echo "ok: shared directory: one storage node, loaded at 2 nodes x 1 by both loads"
echo PASS
