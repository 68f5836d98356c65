#!/usr/bin/env bash
# run.sh — golden-file test of every output format on the core test traces:
# runs the CLI for each case below and compares its output byte for byte
# with tests/golden/<case>; pprof output (*.pb) is kept as text made by
# pprof_text (built beside the CLI), in tests/golden/<case>.txt, so a change
# reads as a text diff. A difference is shown with diff -u. `make golden`
# (run.sh CLI SRC --update) rewrites the files after an intended change;
# review the diff before committing.
# usage: run.sh CLI SOURCE_DIR [--update]
set -uo pipefail
cli=$1 src=$2 update=${3:-}
fx="$src/tests/fixtures"
demo="$src/examples/demo.pftrace"
p1="$fx/perfetto-probes/p1_streaming_profile/trace.pftrace"
p2="$fx/perfetto-probes/p2_perf_sample/trace.pftrace"
java="$fx/relay-compat/java_frame_splitting.pftrace"
build_id="$fx/relay-compat/mapping_with_build_id.pftrace"
folded_in="$src/tests/golden/input.folded"
v2_in="$src/tests/golden/input.sample-v2.json"
# case name | command arguments (word-split; paths have no spaces)
cases=(
  "demo.sample-v2.json|convert -f sample-v2 $demo"
  "demo.report.json|convert -f report $demo"
  "demo.folded|convert -f folded $demo"
  "demo.thread-prefix.folded|convert -f folded --thread-prefix $demo"
  "demo.speedscope.json|convert -f speedscope $demo"
  "demo.svg|convert -f svg $demo"
  "demo.reverse.svg|convert -f svg --reverse --title Icicle $demo"
  "demo.pb|convert -f pprof --uncompressed $demo"
  "p1.folded|convert -f folded --thread-prefix $p1"
  "p1.speedscope.json|convert -f speedscope $p1"
  "p1.svg|convert -f svg $p1"
  "p1.pb|convert -f pprof --uncompressed $p1"
  "p2.folded|convert -f folded --thread-prefix $p2"
  "p2.speedscope.json|convert -f speedscope $p2"
  "p2.svg|convert -f svg $p2"
  "p2.pb|convert -f pprof --uncompressed $p2"
  "java.folded|convert -f folded $java"
  "java.pb|convert -f pprof --uncompressed $java"
  "build_id.pb|convert -f pprof --uncompressed $build_id"
  "build_id.folded|convert -f folded $build_id"
  "diff.p1-p2.folded|diff -f folded $p1 $p2"
  "diff.p1-p2.svg|diff $p1 $p2"
  "folded-input.folded|convert -f folded $folded_in"
  "folded-input.svg|convert -f svg $folded_in"
  "folded-input.speedscope.json|convert -f speedscope $folded_in"
  "folded-input.pb|convert -f pprof --uncompressed $folded_in"
  "sample-v2-input.folded|convert -f folded --thread-prefix $v2_in"
  "sample-v2-input.sample-v2.json|convert -f sample-v2 $v2_in"
  "sample-v2-input.pb|convert -f pprof --uncompressed $v2_in"
)
pprof_text="$(dirname "$cli")/pprof_text"
fail=0
tmp=$(mktemp) raw=$(mktemp)
trap 'rm -f "$tmp" "$raw"' EXIT
for c in "${cases[@]}"; do
  name=${c%%|*} args=${c#*|}
  # shellcheck disable=SC2086
  if ! "$cli" $args -o "$raw" 2>/dev/null; then
    echo "FAIL $name: tracemill $args exited non-zero"; fail=1; continue
  fi
  gold="$src/tests/golden/$name"
  if [[ $name == *.pb ]]; then
    gold="$gold.txt"
    if ! "$pprof_text" "$raw" >"$tmp"; then
      echo "FAIL $name: pprof_text cannot read the output"; fail=1; continue
    fi
  else
    cp "$raw" "$tmp"
  fi
  if [ "$update" = --update ]; then
    cp "$tmp" "$gold"; echo "updated ${gold#"$src/"}"
  elif [ ! -f "$gold" ]; then
    echo "FAIL $name: no golden file (run make golden)"; fail=1
  elif ! cmp -s "$tmp" "$gold"; then
    echo "FAIL $name: output differs from ${gold#"$src/"}:"; fail=1
    diff -u "$gold" "$tmp" | head -40
  else
    echo "ok   $name"
  fi
done
exit $fail
