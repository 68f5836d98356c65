#!/usr/bin/env bash
# fuzz_smoke.sh BUILD SECONDS — runs every libFuzzer target in BUILD (built
# by `make fuzz-smoke`) for SECONDS each, two at a time, from its seed corpus
# and regressions, under ASan+UBSan. New inputs go to a scratch directory,
# never into the repository. Exits 1 if any target finds a crash, leak,
# timeout or out-of-memory, naming the target and the artifact.
set -uo pipefail
build=$1 seconds=$2
src=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
run_one() {
  local t=$1 dir=$scratch/$1
  mkdir -p "$dir/corpus" "$dir/artifacts"
  local seeds=("$src/fuzz/corpus/$t")
  [ -d "$src/fuzz/regressions/$t" ] && seeds+=("$src/fuzz/regressions/$t")
  "$build/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -dict="$src/fuzz/perfetto.dict" -artifact_prefix="$dir/artifacts/" "$dir/corpus" "${seeds[@]}" \
    >"$dir/log" 2>&1
  local rc=$?
  local execs
  execs=$(grep -a 'stat::number_of_executed_units' "$dir/log" | awk '{print $2}')
  if [ $rc -ne 0 ] || [ -n "$(ls -A "$dir/artifacts")" ]; then
    echo "fuzz-smoke: $t FAILED (exit $rc); artifacts:"; ls "$dir/artifacts"
    grep -a -m1 -A30 'ERROR: \|==ERROR\|runtime error' "$dir/log" | head -40
    for a in "$dir"/artifacts/*; do [ -f "$a" ] && base64 -w0 "$a" | head -c 4000 && echo; done
    return 1
  fi
  echo "fuzz-smoke: $t ok, ${execs:-?} runs in ${seconds}s"
}
fail=0
targets=$(cd "$src/fuzz" && ls fuzz_*.c | sed 's/^fuzz_//; s/\.c$//')
set -- $targets
while [ $# -gt 0 ]; do
  run_one "$1" & p1=$!
  p2=
  if [ $# -gt 1 ]; then run_one "$2" & p2=$!; fi
  wait $p1 || fail=1
  [ -n "$p2" ] && { wait $p2 || fail=1; }
  shift; [ $# -gt 0 ] && shift
done
exit $fail
