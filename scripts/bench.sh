#!/usr/bin/env bash
# bench.sh — the benchmark behind `make bench` (not part of `make test`).
# Generates a synthetic trace (2 million samples, 8 threads, PerfSample and
# StreamingProfilePacket, ~20-frame stacks from a pool of 4000 frames), then
# measures (1) decode and conversion in-process, best of 5, and (2) the CLI
# `tracemill convert -f sample-v2 -o FILE` end to end with its peak RSS, and
# prints the figures against the targets of issue 2.
set -euo pipefail
BUILD=${1:-build}
SAMPLES=${BENCH_SAMPLES:-2000000}
dir="$BUILD/bench"
mkdir -p "$dir"
trace="$dir/bench-$SAMPLES.pftrace"
[ -f "$trace" ] || "$BUILD/gen_trace" "$trace" --samples "$SAMPLES" --threads 8 --callstacks 2000 --frames 4000 --depth 20
echo "== in-process (library API)"
"$BUILD/bench_convert" "$trace" 5
echo "== CLI end to end: tracemill convert -f sample-v2 -o $dir/out.json"
out="$dir/out.json"
best=""
rss=0
for i in 1 2 3; do
  start=$(date +%s.%N)
  "$BUILD/tracemill" convert -f sample-v2 -o "$out" "$trace" &
  pid=$!
  peak=0
  while kill -0 $pid 2>/dev/null; do
    r=$(awk '/VmHWM/ {print $2}' /proc/$pid/status 2>/dev/null || echo 0)
    [ -n "$r" ] && [ "$r" -gt "$peak" ] && peak=$r
    sleep 0.005
  done
  wait $pid
  end=$(date +%s.%N)
  best=$(awk -v s="$start" -v e="$end" -v b="$best" 'BEGIN { el = e - s; print (b == "" || el < b) ? el : b }')
  [ "$peak" -gt "$rss" ] && rss=$peak
done
in_b=$(stat -c %s "$trace")
out_b=$(stat -c %s "$out")
samples=$("$BUILD/tracemill" info --json "$trace" | sed 's/.*"kept":\([0-9]*\).*/\1/')
awk -v t="$best" -v in_b="$in_b" -v out_b="$out_b" -v s="$samples" -v rss_kb="$rss" 'BEGIN {
  mbs = in_b / 1e6 / t; sps = s / t / 1e6; rss = rss_kb / 1024; budget = (in_b + out_b) / 1048576 + 16;
  printf "wall %.3f s   %.1f MB/s of trace (target >= 500: %.2fx)   %.2f M samples/s (target >= 20: %.2fx)\n", t, mbs, mbs / 500, sps, sps / 20;
  printf "peak RSS %.1f MB (sampled VmHWM)   budget input + output + 16 MB = %.1f MB (%s)\n", rss, budget, rss <= budget ? "within" : "OVER";
}'
