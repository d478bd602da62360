#!/usr/bin/env bash
# Measure, side by side in one run, the CPU and memory that GPU monitors use while watching
# 8 simulated GPUs, summed over each tool's process tree (gpumon's agent is a child), and
# print gpumon's ratios to nvitop's (the figures docs/architecture.md quotes come from it).
#
#   bash bench/side_by_side.bash 'gpumon-local=gpumon local'   # nvitop -i1, gpustat -i1, plus yours
#
# nvitop and gpustat come from PyPI into the bench's venv, never into the locks:
#   python3 -m venv /tmp/anchors-venv && /tmp/anchors-venv/bin/pip install nvitop gpustat
#   /tmp/anchors-venv/bin/pip install -r requirements.lock && /tmp/anchors-venv/bin/pip install --no-deps -e .
# About 8 minutes. On a 2-core machine differences under about 0.3 points of CPU are
# noise: compare within one run, never across runs; the load average is printed with each
# figure.
#
# Install gpumon into $VENV first ($VENV/bin/pip install -e PATH/TO/PROJECT): every tool
# runs with PATH=$VENV/bin:/usr/bin:/bin, so `python3` there is the venv's.
#
# Each monitor runs under tmux at 120x40 with nvml_shim/ on PYTHONPATH (8 fake GPUs, see
# nvml_shim/sitecustomize.py). After WARMUP s we read utime+stime of the pane's process
# from /proc/PID/stat, wait WINDOW s, read it again, and take VmHWM/VmRSS from
# /proc/PID/status. CPU% = CPU seconds / wall seconds * 100 (100 = one full core).
# Then: one-shot snapshot timings (nvitop -1, gpustat, gpumon snapshot local).
# Env: VENV, WINDOW (60), WARMUP (5), RUNS (2), ONESHOT_RUNS (5), EXTRA_ONESHOT,
#      OUT (/tmp/side-by-side/results), CAPS (/tmp/side-by-side/captures).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
VENV=${VENV:-/tmp/anchors-venv}
WINDOW=${WINDOW:-60}
WARMUP=${WARMUP:-5}
RUNS=${RUNS:-2}
ONESHOT_RUNS=${ONESHOT_RUNS:-5}
OUT=${OUT:-/tmp/side-by-side/results}
CAPS=${CAPS:-/tmp/side-by-side/captures}
HZ=$(getconf CLK_TCK)

# ---- tools ----
if [ ! -x "$VENV/bin/nvitop" ] || [ ! -x "$VENV/bin/gpustat" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q nvitop gpustat
fi
mkdir -p "$OUT" "$CAPS"
"$VENV/bin/pip" list 2>/dev/null | grep -Ei '^(nvitop|gpustat|nvidia-ml-py|psutil|blessed) ' >"$OUT/versions.txt"
{ tmux -V; "$VENV/bin/python" -V; echo "cores: $(nproc)  CLK_TCK: $HZ"; } >>"$OUT/versions.txt"

# ---- 8 real processes for the fake GPUs to "run" (psutil lookups then succeed) ----
SLEEPERS=()
for _ in 1 2 3 4 5 6 7 8; do sleep 10000 & SLEEPERS+=($!); done
SHIM_PIDS=$(IFS=,; echo "${SLEEPERS[*]}")
SOCK=""
cleanup() {  # only what this script started: its tmux server and its sleepers
  [ -n "$SOCK" ] && tmux -L "$SOCK" kill-server 2>/dev/null
  kill "${SLEEPERS[@]}" 2>/dev/null || true
  wait "${SLEEPERS[@]}" 2>/dev/null || true
}
trap cleanup EXIT

tool_env() {  # TERM: a clean, fixed environment for every tool run
  echo "env -i PATH=$VENV/bin:/usr/bin:/bin HOME=$HOME LANG=C.UTF-8 TERM=$1" \
       "PYTHONPATH=$HERE/nvml_shim NVML_SHIM_PIDS=$SHIM_PIDS"
}

tree_pids() {  # PID and every descendant
  local all=$1 p kids next frontier=$1
  while [ -n "$frontier" ]; do
    kids=""
    for p in $frontier; do kids="$kids $(cat /proc/"$p"/task/*/children 2>/dev/null)"; done
    read -r -a next <<<"$kids"
    frontier="${next[*]}"; all="$all $frontier"
  done
  echo "$all"
}
ticks() {  # utime+stime(+cutime+cstime) of PID and every descendant, in clock ticks
  local p
  for p in $(tree_pids "$1"); do sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null; done | awk '{s += $12 + $13 + $14 + $15} END {print s + 0}'
}
tree_kib() {  # KEY (VmRSS, VmHWM) summed over PID and its descendants
  local p
  for p in $(tree_pids "$1"); do awk -v k="$2:" '$1 == k {print $2}' "/proc/$p/status" 2>/dev/null; done | awk '{s += $1} END {print s + 0}'
}
own_ticks() {  # utime+stime of PID alone: the tmux server, whose tree holds the tool
  sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}
kib() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }
now() { date +%s.%N; }

# ---- steady-state cost under tmux ----
measure() {  # NAME RUN COMMAND
  local name=$1 run=$2 cmd=$3 pid srv
  SOCK="anchors-$$-$name-$run"
  # exec: the pane's process is the tool itself (env and the venv's script exec into python);
  # $TERM is tmux's, expanded in the pane's shell
  # shellcheck disable=SC2016
  tmux -L "$SOCK" -f /dev/null new-session -d -x 120 -y 40 -s m "exec $(tool_env '$TERM') $cmd" \; \
    set-option -g remain-on-exit on  # a tool that dies leaves its last screen to capture
  pid=$(tmux -L "$SOCK" display -p '#{pane_pid}')
  srv=$(tmux -L "$SOCK" display -p '#{pid}')
  sleep "$WARMUP"
  local t0 s0 w0 t1 s1 w1 hwm thwm rss exe load
  t0=$(ticks "$pid"); s0=$(own_ticks "$srv"); w0=$(now)
  sleep $((WINDOW - 5))
  tmux -L "$SOCK" capture-pane -p >"$CAPS/$name.run$run.txt"
  sleep 5
  if [ ! -d "/proc/$pid" ]; then
    echo "$name run $run: PID $pid exited before the window ended; see $CAPS/$name.run$run.txt" >&2
    exit 1
  fi
  t1=$(ticks "$pid"); s1=$(own_ticks "$srv"); w1=$(now)
  hwm=$(kib "$pid" VmHWM); thwm=$(tree_kib "$pid" VmHWM); rss=$(tree_kib "$pid" VmRSS)
  exe=$(readlink "/proc/$pid/exe"); load=$(cut -d' ' -f1 /proc/loadavg)
  tmux -L "$SOCK" kill-server; SOCK=""
  awk -v n="$name" -v r="$run" -v dt=$((t1 - t0)) -v ds=$((s1 - s0)) -v hz="$HZ" \
      -v hwm="$hwm" -v thwm="$thwm" -v rss="$rss" -v exe="$exe" -v w0="$w0" -v w1="$w1" \
      -v load="$load" 'BEGIN {
    wall = w1 - w0
    printf "%s\t%d\t%.2f\t%d\t%.2f\t%.1f\t%.1f\t%.1f\t%.2f\t%s\t%s\n", n, r, wall, dt,
           100 * dt / hz / wall, hwm / 1024, thwm / 1024, rss / 1024, 100 * ds / hz / wall, load, exe }' >>"$OUT/steady.tsv"
  tail -n 1 "$OUT/steady.tsv"
}

# ---- one snapshot, including interpreter start-up (not a TTY) ----
oneshot() {  # NAME RUN COMMAND
  local name=$1 i=$2 cmd=$3 s e
  s=$(now)
  /usr/bin/time -f '%U %S %M' -o "$OUT/.time" bash -c "$(tool_env dumb) $cmd" >/dev/null 2>&1
  e=$(now)
  printf '%s\t%d\t%s\t%s\t%s\n' "$name" "$i" "$(awk -v s="$s" -v e="$e" 'BEGIN{printf "%.3f", e - s}')" \
    "$(tr ' ' '\t' <"$OUT/.time")" "$(cut -d' ' -f1 /proc/loadavg)" >>"$OUT/oneshot.tsv"
  rm -f "$OUT/.time"
}

CONFIGS=(
  "nvitop-i1=nvitop --interval 1"
  "gpustat-i1=gpustat --interval 1"
  "$@"
)
ONESHOTS=("nvitop -1" "gpustat" "gpumon snapshot local")
# one more one-shot, e.g. another build's: EXTRA_ONESHOT='/tmp/main-venv/bin/gpumon snapshot local'
if [ -n "${EXTRA_ONESHOT:-}" ]; then ONESHOTS+=("$EXTRA_ONESHOT"); fi

printf 'name\trun\twall_s\tcpu_ticks\tcpu_pct\tvmhwm_mib\ttree_vmhwm_mib\tvmrss_end_mib\ttmux_server_cpu_pct\tload1\texe\n' >"$OUT/steady.tsv"
for run in $(seq 1 "$RUNS"); do  # interleaved: A1 B1 C1 D1 A2 B2 ...
  for c in "${CONFIGS[@]}"; do measure "${c%%=*}" "$run" "${c#*=}"; done
done

printf 'name\trun\twall_s\tuser_s\tsys_s\tmaxrss_kib\tload1\n' >"$OUT/oneshot.tsv"
for i in $(seq 0 "$ONESHOT_RUNS"); do  # interleaved too; run 0 warms the page cache, unrecorded
  for c in "${ONESHOTS[@]}"; do oneshot "$c" "$i" "$c"; done
done
awk -F'\t' 'NR == 1 || $2 != 0' "$OUT/oneshot.tsv" >"$OUT/.tsv" && mv "$OUT/.tsv" "$OUT/oneshot.tsv"

# ---- summary ----
med() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
{
  echo "| config | run | CPU % of one core | peak RSS (VmHWM) MiB | tree peak (sum of VmHWM) MiB | tree RSS at end MiB | tmux server CPU % | load avg |"
  echo "|---|---|---|---|---|---|---|---|"
  awk -F'\t' 'NR > 1 {printf "| %s | %s | %.2f | %.1f | %.1f | %.1f | %.2f | %s |\n", $1, $2, $5, $6, $7, $8, $9, $10}' "$OUT/steady.tsv"
  echo
  echo "| one-shot | median wall s (of $ONESHOT_RUNS) | median user+sys s | median max RSS MiB | load avg |"
  echo "|---|---|---|---|---|"
  for n in "${ONESHOTS[@]}"; do
    awk -F'\t' -v n="$n" '$1 == n' "$OUT/oneshot.tsv" >"$OUT/.one"
    printf '| %s | %s | %s | %.1f | %s |\n' "$n" \
      "$(cut -f3 "$OUT/.one" | med)" \
      "$(awk -F'\t' '{printf "%.2f\n", $4 + $5}' "$OUT/.one" | med)" \
      "$(cut -f6 "$OUT/.one" | med | awk '{print $1 / 1024}')" \
      "$(cut -f7 "$OUT/.one" | med)"
  done
  rm -f "$OUT/.one"
  echo
  echo "ratios to nvitop in the same run (CPU: per run; one-shot: medians):"
  awk -F'\t' 'NR > 1 {cpu[$1, $2] = $5; rss[$1, $2] = $8; names[$1] = 1; runs[$2] = 1}
    END {
      for (n in names) {
        if (n ~ /^nvitop/) continue
        line = ""
        for (r in runs) if (cpu["nvitop-i1", r] > 0)
          line = line sprintf(" run %s: CPU %.2fx, tree RSS %.2fx;", r, cpu[n, r] / cpu["nvitop-i1", r], rss[n, r] / rss["nvitop-i1", r])
        print "  " n ":" line
      }
    }' "$OUT/steady.tsv"
  nv=$(awk -F'\t' '$1 == "nvitop -1"' "$OUT/oneshot.tsv" | cut -f3 | med)
  gm=$(awk -F'\t' '$1 == "gpumon snapshot local"' "$OUT/oneshot.tsv" | cut -f3 | med)
  awk -v a="$gm" -v b="$nv" 'BEGIN {printf "  gpumon snapshot local / nvitop -1: %.2fx wall\n", a / b}'
} | tee "$OUT/summary.md"
