#!/usr/bin/env bash
# onyx-launch.sh — starts N ranks of a command on this machine torchrun-style,
# without mpirun (docs/distributed.md, "Launch without mpirun").
#
#   scripts/onyx-launch.sh N COMMAND [ARGS...]
#   scripts/onyx-launch.sh 2 onyx train model.onnx ... --data-parallel
#
# Rank r runs COMMAND with RANK=r, LOCAL_RANK=r, WORLD_SIZE=N,
# LOCAL_WORLD_SIZE=N, MASTER_ADDR (default 127.0.0.1) and MASTER_PORT
# (default: a port found free on MASTER_ADDR). Rank 0's process group serves
# the TCP store there; the others connect to it. The first rank to fail
# stops the others (SIGTERM); the exit status is that rank's, or 0 when
# every rank succeeded. For several machines, start the ranks there with the
# same variables (MASTER_ADDR: rank 0's machine).
set -u
if [ $# -lt 2 ] || ! [[ "$1" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 N COMMAND [ARGS...]   (N ranks, N >= 1)" >&2
  exit 2
fi
N="$1"
shift
ADDR="${MASTER_ADDR:-127.0.0.1}"
PORT="${MASTER_PORT:-}"
if [ -z "$PORT" ]; then
  # A port nobody answers on: connecting to it fails.
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/$ADDR/$p") 2>/dev/null; then
      PORT=$p
      break
    fi
  done
  [ -n "$PORT" ] || { echo "$0: no free port found on $ADDR" >&2; exit 1; }
fi

pids=()
for ((r = 0; r < N; r++)); do
  RANK=$r LOCAL_RANK=$r WORLD_SIZE=$N LOCAL_WORLD_SIZE=$N MASTER_ADDR="$ADDR" MASTER_PORT="$PORT" \
    "$@" &
  pids+=($!)
done

stop_all() {
  for p in "${pids[@]}"; do
    kill -TERM "$p" 2>/dev/null
  done
}
trap 'stop_all; wait; exit 130' INT TERM

status=0
left=$N
while [ "$left" -gt 0 ]; do
  wait -n
  rc=$?
  left=$((left - 1))
  if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then
    status=$rc
    echo "$0: a rank exited with status $rc: stopping the others" >&2
    stop_all
  fi
done
exit "$status"
