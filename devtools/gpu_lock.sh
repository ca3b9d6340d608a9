# Sourced first by every device script (device_qualify.sh, ep_bench_device.sh,
# flashinfer_device.sh, nvshmem_device.sh): one of them at a time on the GPU machine. The
# suites hold the GPU alone and their neighbour watch fails them beside any other process, at
# the end of the run (2026-12-05: `multi 2` beside `multi 2 memcheck` and the NVSHMEM probe
# cost 325 s of device time for three failures, and two preludes unpacking at once broke one);
# a second script now stops at once, exit status 3, naming the lock. The lock is an flock on
# MEGAMOE_GPU_LOCK (default /tmp/megamoe-gpu.lock) held by file descriptor 9 until the script
# and its children end (a child left running keeps it: it would be the next run's GPU
# neighbour too). Without flock(1) the scripts run unlocked, saying so.
gpu_lock=${MEGAMOE_GPU_LOCK:-/tmp/megamoe-gpu.lock}
if command -v flock > /dev/null 2>&1; then
  exec 9> "$gpu_lock"
  if ! flock -n 9; then
    echo "$(basename "$0"): another device script holds the GPU (lock $gpu_lock; or a process it left running, which inherits the lock): run them one after the other, never beside each other" >&2
    exit 3
  fi
else
  echo "$(basename "$0"): no flock(1) here: running without the GPU lock" >&2
fi
