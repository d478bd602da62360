# shellcheck shell=sh source-path=SCRIPTDIR
# Signal a job: sh -c SCRIPT gpumon-job JOBS_DIR JOB SIGNAL. Sends SIGNAL to the job's
# process group and to each live member, unless its record's PID was reused; prints
# signalled=PIDS when there was any.
. ./funcs.sh
dir=$(jobs_dir "$1"); job=$2; sig=$3; rec="$dir/$job.json"
[ -r "$rec" ] || exit 0
read_record "$rec"
[ "$stale" = 1 ] && exit 0
pids=$(members "$pgid")
[ -n "$pids" ] || exit 0
kill -s "$sig" -- "-$pgid" 2>/dev/null
for p in $pids; do kill -s "$sig" "$p" 2>/dev/null; done
echo "signalled=$pids"
