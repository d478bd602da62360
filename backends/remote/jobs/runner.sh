# shellcheck shell=sh
# gpumon job runner (generated): sh ./gpumon-run.sh JOB, run in the jobs directory
# (launch.sh writes it there; it reads JOB.env, writes the PID record, runs the command).
job=$1; dir=$PWD
# shellcheck source=/dev/null  # the environment launch.sh saved for this start
. "./$job.env" || exit 70
rm -f "./$job.env"
log=$GPUMON_JOB_LOG cmd=$GPUMON_JOB_CMD wd=$GPUMON_JOB_WORKDIR method=$GPUMON_JOB_METHOD
token=$GPUMON_JOB_TOKEN session=$GPUMON_JOB_SESSION
unset GPUMON_JOB_LOG GPUMON_JOB_CMD GPUMON_JOB_WORKDIR GPUMON_JOB_METHOD GPUMON_JOB_TOKEN \
  GPUMON_JOB_SESSION
# stdin stays the tmux pane's terminal: tmux closes a pane whose terminal nobody holds
exec >> "$log" 2>&1
pgid=$$ sid=$$ pstart=
if [ -r /proc/$$/stat ]; then
  # shellcheck disable=SC2046  # the fields of /proc/PID/stat after its "(comm) "
  set -- $(sed 's/.*) //' /proc/$$/stat); pgid=$3 sid=$4 pstart=${20}
fi
esc() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g'; }
printf '{"job": "%s", "pid": %s, "pgid": %s, "sid": %s, "proc_start": "%s", "started": %s, "method": "%s", "session": "%s", "token": "%s", "log": "%s"}\n' \
  "$job" $$ "$pgid" "$sid" "$pstart" "$(date +%s)" "$method" "$session" "$token" \
  "$(esc "$log")" > "./$job.json.tmp" && mv "./$job.json.tmp" "./$job.json"
if [ -n "$wd" ]; then cd "$wd" || exit 71; fi
sh -c "$cmd" < /dev/null
code=$?
printf '%s %s %s\n' "$code" "$(date +%s)" "$token" > "$dir/$job.exit"
exit $code
