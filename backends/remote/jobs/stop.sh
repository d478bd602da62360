# shellcheck shell=sh
# A job's own stop command: sh -c SCRIPT gpumon-job WORKDIR COMMAND NAME=VALUE... runs
# COMMAND in WORKDIR (when not empty) with the NAME=VALUE pairs exported.
wd=$1; cmd=$2; shift 2
# shellcheck disable=SC2163  # each argument is NAME=VALUE: it exports that assignment
for a in "$@"; do export "$a" || exit 76; done
if [ -n "$wd" ]; then cd "$wd" || exit 71; fi
exec sh -c "$cmd" </dev/null
