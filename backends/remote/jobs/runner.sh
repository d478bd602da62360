# shellcheck shell=sh
# gpumon job runner (generated): sh ./gpumon-run.sh JOB, run in the jobs directory
# (launch.sh writes it there; it reads JOB.env, writes the PID record, runs the command).
# The job's environment, gpumon_job_env from JOB.env, is applied only in the subshell that
# runs the command, after which that subshell reads no variable: a job's env may name any.
gpumon_job=$1 gpumon_dir=$PWD
# shellcheck source=/dev/null  # the environment launch.sh saved for this start
. "./$gpumon_job.env" || exit 70
rm -f "./$gpumon_job.env"
gpumon_log=$GPUMON_JOB_LOG gpumon_cmd=$GPUMON_JOB_CMD gpumon_wd=$GPUMON_JOB_WORKDIR
gpumon_method=$GPUMON_JOB_METHOD gpumon_token=$GPUMON_JOB_TOKEN
gpumon_session=$GPUMON_JOB_SESSION
unset GPUMON_JOB_LOG GPUMON_JOB_CMD GPUMON_JOB_WORKDIR GPUMON_JOB_METHOD GPUMON_JOB_TOKEN \
  GPUMON_JOB_SESSION
# stdin stays the tmux pane's terminal: tmux closes a pane whose terminal nobody holds
exec >> "$gpumon_log" 2>&1
gpumon_pgid=$$ gpumon_sid=$$ gpumon_pstart=
if [ -r /proc/$$/stat ]; then
  # shellcheck disable=SC2046  # the fields of /proc/PID/stat after its "(comm) "
  set -- $(sed 's/.*) //' /proc/$$/stat); gpumon_pgid=$3 gpumon_sid=$4 gpumon_pstart=${20}
fi
esc() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g'; }
printf '{"job": "%s", "pid": %s, "pgid": %s, "sid": %s, "proc_start": "%s", "started": %s, "method": "%s", "session": "%s", "token": "%s", "log": "%s"}\n' \
  "$gpumon_job" $$ "$gpumon_pgid" "$gpumon_sid" "$gpumon_pstart" "$(date +%s)" \
  "$gpumon_method" "$gpumon_session" "$gpumon_token" "$(esc "$gpumon_log")" \
  > "./$gpumon_job.json.tmp" && mv "./$gpumon_job.json.tmp" "./$gpumon_job.json"
(
  set -- "$gpumon_cmd" "$gpumon_wd"
  gpumon_job_env
  if [ -n "$2" ]; then cd "$2" || exit 71; fi
  exec sh -c "$1"
) < /dev/null
gpumon_code=$?
printf '%s %s %s\n' "$gpumon_code" "$(date +%s)" "$gpumon_token" > "$gpumon_dir/$gpumon_job.exit"
exit $gpumon_code
