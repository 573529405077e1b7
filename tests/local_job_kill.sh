# Sourced by the `kestrel local` tests: kill_after_first_checkpoint RUN_DIR VICTIM [DELAY] kills VICTIM (a name
# in RUN_DIR/pids.json, e.g. "server 1" or "worker 0") with SIGKILL right after (or DELAY seconds after) the
# job's first checkpoint is committed (RUN_DIR/scheduler.log says so). The victim's pid is read before the job gets going, so the kill
# follows the first commit at once, however slow a process start on a loaded machine would be. Exits 1 when
# no pids.json or no commit appears in time.
kill_after_first_checkpoint() {
  local run=$1 victim=$2 delay=${3:-0} pid=""
  for _ in $(seq 600); do
    pid=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$run/pids.json" \
      "$victim" 2>/dev/null) && break
    sleep 0.05
  done
  [[ -n "$pid" ]] || { echo "no pids.json"; exit 1; }
  for _ in $(seq 3000); do
    grep -q "committed at clock" "$run/scheduler.log" 2>/dev/null && break
    sleep 0.02
  done
  grep -q "committed at clock" "$run/scheduler.log" || { echo "no checkpoint was committed"; exit 1; }
  sleep "$delay"
  kill -9 "$pid"
  echo "killed $victim (pid $pid)"
}
