# shellcheck shell=sh source-path=SCRIPTDIR
# A job's state: sh -c SCRIPT gpumon-job JOBS_DIR JOB LOG WORKDIR (JOBS_DIR, LOG and
# WORKDIR may be empty). Prints key=value lines: dir, log, tmux, setsid, and when the job
# has a PID record: record, alive, stale, pids, exit; logstat when the log exists.
. ./funcs.sh
dir=$(jobs_dir "$1"); job=$2; log=$(resolve_log "$3" "$4" "$(jobs_dir "$1")" "$2")
rec="$dir/$job.json"
echo "dir=$dir"; echo "log=$log"
command -v tmux >/dev/null 2>&1 && echo tmux=1
command -v setsid >/dev/null 2>&1 && echo setsid=1
if [ -r "$rec" ]; then
  echo "record=$(tr -d '\n' < "$rec")"
  read_record "$rec"
  echo "alive=$alive"; echo "stale=$stale"
  [ "$stale" = 1 ] || echo "pids=$(members "$pgid")"
  [ -r "$dir/$job.exit" ] && echo "exit=$(cat "$dir/$job.exit")"
fi
[ -f "$log" ] && echo "logstat=$(stat -c '%s %Y' "$log" 2>/dev/null)"
exit 0
