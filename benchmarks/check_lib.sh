# Helpers of the device-check scripts (sourced: gpu_check_nonlinear.sh; gpu_check.sh can use the same).
# The caller sets: logs (a folder), deadline (epoch seconds), budget (seconds, for the message), summary=().

# note NAME TEXT: a summary line, echoed now and printed again at the end.
note() { summary+=("$(printf '%-14s| %s' "$1" "$2")"); echo "-- $1: $2"; }

# step NAME LIMIT CMD...: CMD with LIMIT seconds (less if the budget is nearly spent), output in
# $logs/NAME.log; its exit status (124: timed out, 125: no time left).
step() {
  local name=$1 limit=$2 left=$((deadline - $(date +%s) - 5))
  shift 2
  ((left < limit)) && limit=$left
  if ((limit < 10)); then
    echo "skipped: the $budget s budget is spent" >"$logs/$name.log"
    return 125
  fi
  timeout "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  ((rc == 124)) && echo "timed out after ${limit}s" >>"$logs/$name.log"
  return $rc
}
