# shellcheck shell=sh
# A job's own stop command: sh -c SCRIPT gpumon-job WORKDIR COMMAND NAME=VALUE... runs
# COMMAND in WORKDIR (when not empty) with the NAME=VALUE pairs exported. The pairs are the
# job's env, so they may name any variable: WORKDIR and COMMAND move behind them and only
# the positional parameters are read from then on.
set -- "$@" "$1" "$2"; shift 2
# shellcheck disable=SC2163  # each argument is NAME=VALUE: it exports that assignment
while [ $# -gt 2 ]; do export "$1" || exit 76; shift; done
if [ -n "$1" ]; then cd "$1" || exit 71; fi
exec sh -c "$2" </dev/null
