# Sourced by the script tests (cluster_script_test.sh, readme_test.sh): free port ranges for a scripts/cluster
# cluster, whose node i listens on BASE+i (HTTP), BASE+100+i (peer) and BASE+200+i (gRPC).

# Whether a TCP socket is bound to port $1 now.
port_in_use() { ss -Htan "( sport = :$1 )" 2>/dev/null | grep -q .; }

# Prints a base port BASE, a multiple of 100 in [$1, $1 + 9700], such that BASE+1..BASE+9, BASE+101..BASE+109
# and BASE+201..BASE+209 are free now; fails after 50 tries. Give each test its own $1 range below the kernel's
# ephemeral range (32768-60999), where other tests' port-0 sockets land.
pick_base() {
  local low=$1 attempt base p busy
  for attempt in $(seq 1 50); do
    base=$((low + (RANDOM % 98) * 100))
    busy=0
    for p in $(seq $((base + 1)) $((base + 9))) $(seq $((base + 101)) $((base + 109))) \
      $(seq $((base + 201)) $((base + 209))); do
      if port_in_use "$p"; then busy=1; break; fi
    done
    ((busy)) || { echo "$base"; return 0; }
  done
  return 1
}
