# Sourced by the e2e scripts that need two "nodes" on one machine: two
# network namespaces joined by a veth pair (10.231.0.1/24 <-> 10.231.0.2/24,
# addresses that exist only inside these namespaces; nothing is sent anywhere
# else). The veth pair is created inside ns0 with its peer moved to ns1: the
# host's own namespace is never touched.
#
# netns_nodes_setup: sets ns0, ns1 and work (a fresh directory), removes all
# three on exit (trap). Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN); otherwise
# it prints why and exits 77, which ctest reports as skipped
# (SKIP_RETURN_CODE 77). Also defines skip and fail (which prints the
# *.out files under $work).
skip() { echo "SKIP: $*"; rm -rf "$work"; exit 77; }
fail() { echo "FAIL: $*"; for f in "$work"/*.out; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done; exit 1; }
netns_nodes_cleanup() {
  ip netns del "$ns0" 2>/dev/null
  ip netns del "$ns1" 2>/dev/null
  rm -rf "$work"
}
netns_nodes_setup() {
  local tag=rw$$
  ns0=${tag}n0; ns1=${tag}n1
  work=$(mktemp -d "${TMPDIR:-/tmp}/rankwise-netns-XXXXXX")
  command -v ip >/dev/null || skip "the 'ip' command (iproute2) is not installed"
  local err
  if ! err=$(ip netns add "$ns0" 2>&1); then
    skip "cannot create a network namespace ('ip netns add' failed: $err); run as root to test multi-node"
  fi
  trap netns_nodes_cleanup EXIT
  ip netns add "$ns1" || fail "ip netns add $ns1"
  ip -n "$ns0" link add veth0 type veth peer name veth1 netns "$ns1" || fail "veth pair"
  ip -n "$ns0" addr add 10.231.0.1/24 dev veth0 || fail "address ns0"
  ip -n "$ns1" addr add 10.231.0.2/24 dev veth1 || fail "address ns1"
  for ns in "$ns0" "$ns1"; do
    ip -n "$ns" link set lo up || fail "lo up in $ns"
  done
  ip -n "$ns0" link set veth0 up || fail "veth0 up"
  ip -n "$ns1" link set veth1 up || fail "veth1 up"
}
