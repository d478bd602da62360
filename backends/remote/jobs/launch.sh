# shellcheck shell=sh source-path=SCRIPTDIR
# Start a job detached: sh -c SCRIPT gpumon-job JOBS_DIR JOB LOG WORKDIR COMMAND METHOD
# NAME=VALUE... (METHOD auto, tmux or setsid). Takes the job's launch lock, refuses when it
# runs already, saves its environment, writes the runner and starts it in a tmux session
# or under setsid nohup, then prints the PID record the runner writes (exit 70-79: why not).
. ./funcs.sh
dir=$(jobs_dir "$1"); job=$2; wd=${4:-$PWD}; cmd=$5; method=$6
log=$(resolve_log "$3" "$4" "$dir" "$2")
shift 6
{ mkdir -p "$dir" && cd "$dir"; } || { echo "gpumon: cannot create $dir" >&2; exit 70; }
if [ ! -d "$wd" ]; then echo "gpumon: workdir $wd: no such directory" >&2; exit 71; fi
if [ "$method" = auto ]; then
  if command -v tmux >/dev/null 2>&1; then method=tmux; else method=setsid; fi
fi
if [ "$method" = setsid ] && ! command -v setsid >/dev/null 2>&1; then
  echo "gpumon: neither tmux nor setsid on the target; cannot start a detached job" >&2; exit 72
fi
# One launch at a time per job (another gpumon may be restarting it too).
find . -maxdepth 1 -name "$job.lock" -mmin +2 -exec rmdir {} \; 2>/dev/null
mkdir "$job.lock" 2>/dev/null || { echo "gpumon: another gpumon is starting $job" >&2; exit 73; }
trap 'rmdir "$dir/$job.lock" 2>/dev/null' EXIT
if [ -r "$job.json" ]; then
  read_record "$job.json"
  running=$(members "$pgid")
  if [ "$stale" = 0 ] && [ -n "$running" ]; then
    echo "gpumon: $job is already running (PIDs ${running% })" >&2; exit 74
  fi
fi
mkdir -p "$(dirname "$log")" 2>/dev/null
( : >> "$log" ) 2>/dev/null || { echo "gpumon: cannot write the log $log" >&2; exit 75; }
session=; [ "$method" = tmux ] && session=$(printf '%s' "gpumon-$job" | tr '.:' '__')
token="$$.$(date +%s)"
rm -f "$job.json" "$job.exit" "$job.launch.err"
# JOB.env, which the runner sources: this shell's environment with the runner's values as
# GPUMON_JOB_*, then the job's whole environment as the function gpumon_job_env (export -p
# quotes every value), which the runner calls only in the subshell that runs the command.
# The job's NAME=VALUE pairs are exported only in a subshell here, never in this shell, and
# once they are set only positional parameters are read: a pair may name any variable.
(
  umask 077
  ( export GPUMON_JOB_LOG="$log" GPUMON_JOB_CMD="$cmd" GPUMON_JOB_WORKDIR="$wd" \
      GPUMON_JOB_METHOD="$method" GPUMON_JOB_SESSION="$session" GPUMON_JOB_TOKEN="$token"
    export -p ) || exit
  printf 'gpumon_job_env() {\n:\n'
  set -- "$@" "$job"
  # shellcheck disable=SC2163  # each argument is NAME=VALUE: it exports that assignment
  ( while [ $# -gt 1 ]; do export "$1" || exit; shift; done
    export GPUMON_JOB="$1"
    export -p ) || exit
  printf '}\n'
) > "$job.env.tmp" && mv "$job.env.tmp" "$job.env" || exit 77
cat > "gpumon-run.sh.$$" <<'GPUMON_RUNNER_EOF'
. ./runner.sh
GPUMON_RUNNER_EOF
mv "gpumon-run.sh.$$" gpumon-run.sh
if [ "$method" = tmux ]; then
  tmux new-session -d -s "$session" -c "$dir" "exec sh ./gpumon-run.sh $job" \
    </dev/null >/dev/null 2>"$job.launch.err" || {
    echo "gpumon: tmux could not start session $session:" >&2; cat "$job.launch.err" >&2
    rm -f "$job.env"; exit 78; }
else
  setsid nohup sh ./gpumon-run.sh "$job" </dev/null >"$job.launch.err" 2>&1 &
fi
i=0
while [ $i -lt 100 ]; do
  if [ -s "$job.json" ] && grep -q "\"token\": \"$token\"" "$job.json"; then
    cat "$job.json"; exit 0
  fi
  sleep 0.1 2>/dev/null || sleep 1
  i=$((i + 1))
done
echo "gpumon: $job did not write its PID record within 10 s" >&2
cat "$job.launch.err" >&2 2>/dev/null
exit 79
