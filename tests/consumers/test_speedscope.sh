#!/usr/bin/env bash
# test_speedscope.sh — speedscope output checked by speedscope's own file
# format schema (ajv, via speedscope_check.mjs) for three inputs: the demo
# Perfetto trace, a Relay fixture with empty callstacks, and folded stacks
# (untimed). The samples in the profiles must be the trace's samples: for
# Perfetto input, non-empty samples = samples kept (tracemill info --json)
# minus the empty-stack ones (the "[no frames]" line of the folded output);
# for folded input, one sample per line and weights adding up to the counts.
# Then speedscope itself (speedscope_load.mjs, headless Chromium) imports
# two of the files.
# usage: test_speedscope.sh CLI SOURCE_DIR BUILD_DIR (exit 77, skipped, when its tools or
# BUILD_DIR/consumers are absent: see require.sh)
set -euo pipefail
cli="$1" src="$2" build="$3"
consumers="$build/consumers"
check="$src/tests/consumers/speedscope_check.mjs"
source "$src/tests/consumers/require.sh"
require_cmd node
require_file "$consumers/node_modules/speedscope" "$consumers/node_modules/ajv" \
  "$consumers/node_modules/playwright-core"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

kept() { # samples kept by tracemill info --json
  "$cli" info --json "$1" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).samples.kept))'
}
field() { # the value of NAME=... in a "counts ..." line
  sed -n "s/^counts .*\b$1=\([0-9]*\).*/\1/p" <<<"$2"
}

timed() {
  local trace="$1" name
  name="$(basename "$trace" .pftrace)"
  "$cli" convert -f speedscope -o "$tmp/$name.json" "$trace"
  local out empty total
  out="$(node "$check" "$consumers" "$tmp/$name.json" nanoseconds)"
  echo "$out" | grep -v '^counts'
  empty="$("$cli" convert -f folded "$trace" | sed -n 's/^\[no frames\] \([0-9]*\)$/\1/p')"
  empty="${empty:-0}"
  total="$(kept "$trace")"
  [ "$total" -gt 0 ] || { echo "FAIL: $name has no samples to check"; exit 1; }
  [ "$(field nonempty "$out")" -eq $((total - empty)) ] ||
    { echo "FAIL: $name: $(field nonempty "$out") non-empty samples, trace has $total of which $empty empty"; exit 1; }
  [ "$(field samples "$out")" -ge "$total" ] ||
    { echo "FAIL: $name: $(field samples "$out") samples in the profiles, fewer than the trace's $total"; exit 1; }
  echo "ok: $name: $total samples ($empty with empty stacks) in $(field profiles "$out") profiles"
}

timed "$src/examples/demo.pftrace"
timed "$src/tests/fixtures/relay-compat/empty_callstack.pftrace"

# Folded input: the demo's folded stacks read back.
"$cli" convert -f folded -o "$tmp/demo.folded" "$src/examples/demo.pftrace"
"$cli" convert -f speedscope -o "$tmp/folded.json" "$tmp/demo.folded"
out="$(node "$check" "$consumers" "$tmp/folded.json" none)"
echo "$out" | grep -v '^counts'
lines="$(grep -c . "$tmp/demo.folded")"
sum="$(awk '{ s += $NF } END { print s }' "$tmp/demo.folded")"
[ "$(kept "$tmp/demo.folded")" -eq "$lines" ] || { echo "FAIL: info counts $(kept "$tmp/demo.folded") samples, the file has $lines lines"; exit 1; }
[ "$(field samples "$out")" -eq "$lines" ] || { echo "FAIL: $(field samples "$out") samples for $lines folded lines"; exit 1; }
[ "$(field weight "$out")" -eq "$sum" ] || { echo "FAIL: weights add up to $(field weight "$out"), counts to $sum"; exit 1; }
[ "$sum" -eq "$(kept "$src/examples/demo.pftrace")" ] || { echo "FAIL: folded counts $sum != the demo's samples"; exit 1; }
echo "ok: folded input: $lines lines, weights add up to the $sum samples of the demo"

# The real consumer: speedscope itself imports and draws the files
# (headless Chromium; skipped when Chromium is missing).
"$cli" convert -f speedscope --title "tracemill demo" -o "$tmp/titled.json" "$src/examples/demo.pftrace"
node "$src/tests/consumers/speedscope_load.mjs" "$consumers" "$tmp/titled.json" "tracemill demo"
node "$src/tests/consumers/speedscope_load.mjs" "$consumers" "$tmp/folded.json" "tracemill"
