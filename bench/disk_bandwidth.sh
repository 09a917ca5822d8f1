# Sourced by the checkpoint bench scripts.
# dd_mib_per_s DIR SIZE_MIB: the disk's sequential write bandwidth, in MiB/s:
# one `dd if=/dev/zero bs=1M count=SIZE_MIB conv=fdatasync` into DIR/dd.bin
# (after a sync, so no earlier write-back competes), the file removed after.
dd_mib_per_s() {
  rm -f "$1/dd.bin"
  sync
  LC_ALL=C dd if=/dev/zero of="$1/dd.bin" bs=1M count="$2" conv=fdatasync 2>&1 |
    awk '/bytes/ && /copied/ {for (i = 1; i <= NF; i++) if ($i == "copied,") s = $(i + 1);
                               printf "%.1f\n", $1 / s / 1048576}'
  rm -f "$1/dd.bin"
}
# enough_space DIR NEED_MIB SCRIPT: true when DIR's filesystem has NEED_MIB
# free; else prints why SCRIPT is skipped.
enough_space() {
  local free_mib
  free_mib=$(df -Pm "$1" | awk 'NR == 2 {print $4}')
  if [ "$free_mib" -lt "$2" ]; then
    echo "$3: only $free_mib MiB free on $(df -P "$1" | awk 'NR == 2 {print $6}'), need $2; skipped"
    return 1
  fi
}
