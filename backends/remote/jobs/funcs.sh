# shellcheck shell=sh
# The functions the job scripts share; each script includes this file (the loader puts
# it in place of their `. ./funcs.sh` line). POSIX sh.
# `pct exec` may give a session without HOME: take it from the passwd entry (not exported).
: "${HOME:=$(getent passwd "$(id -u)" 2>/dev/null | cut -d: -f6)}"
jobs_dir() {
  if [ -n "$1" ]; then printf '%s' "$1"
  else printf '%s' "${XDG_STATE_HOME:-$HOME/.local/state}/gpumon/jobs"; fi
}
resolve_log() { # $1 log (may be empty), $2 workdir, $3 jobs dir, $4 job
  case $1 in
    "") printf '%s' "$3/$4.log" ;;
    /*) printf '%s' "$1" ;;
    \~/*) printf '%s' "$HOME/${1#??}" ;;
    *) printf '%s' "${2:-$PWD}/$1" ;;
  esac
}
field() { sed -n "s/.*\"$1\": *\"\{0,1\}\([0-9][0-9]*\).*/\1/p" "$2" | head -n 1; }
# Sets pid, pgid, stale, alive from record $1; members: live PIDs in its group or session.
# shellcheck disable=SC2034  # its results are read by the script that includes this file
read_record() {
  pid=$(field pid "$1"); pgid=$(field pgid "$1"); pstart=$(field proc_start "$1")
  alive=0; stale=0
  if [ -n "$pid" ] && [ -r "/proc/$pid/stat" ]; then
    # shellcheck disable=SC2046  # the fields of /proc/PID/stat after its "(comm) "
    set -- $(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null)
    if [ $# -lt 20 ]; then :  # it exited just now
    elif [ -n "$pstart" ] && [ "${20}" != "$pstart" ]; then stale=1  # the PID was reused
    elif [ "$1" != Z ]; then alive=1; fi
  fi
}
members() { # $1 group/session id; zombies do not count
  [ -n "$1" ] && [ "$1" -gt 1 ] || return 0
  cat /proc/[0-9]*/stat 2>/dev/null | awk -v g="$1" '{
    pid = $1; line = $0; sub(/.*\) /, "", line); n = split(line, f, " ")
    if ((f[3] == g || f[4] == g) && f[1] != "Z") printf "%s ", pid }'
}
