# netns_nodes.sh, sourced by the multi-node tests (multinode_netns.sh,
# elastic_netns.sh): two "nodes" on one machine, two network namespaces
# created here ($ns0, $ns1) joined by a veth pair (10.231.0.1/24 on veth0 in
# $ns0 <-> 10.231.0.2/24 on veth1 in $ns1, addresses that exist only inside
# these namespaces; nothing is sent anywhere else), loopback up in each.
# Defines $work (a temporary directory), fail MESSAGE (prints every
# $work/*.out, exits 1) and skip MESSAGE (exit 77: ctest's skipped). Needs
# root (CAP_SYS_ADMIN, CAP_NET_ADMIN), else skips. Both namespaces and $work
# are removed on exit (trap). The caller sets its own store port.
tag=rw$$
ns0=${tag}n0; ns1=${tag}n1
work=$(mktemp -d "${TMPDIR:-/tmp}/rankwise-netns-XXXXXX")
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
