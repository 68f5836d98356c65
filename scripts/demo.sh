#!/usr/bin/env bash
# demo.sh — `make demo`: converts the bundled example trace (an Android-style
# profile: 4 threads, PerfSample and StreamingProfilePacket, Java and native
# frames) to a Sentry Sample v2 chunk and prints what it holds, then to
# pprof, folded stacks, speedscope JSON and a flame graph SVG.
set -euo pipefail
BUILD=${1:-build}
tm="$BUILD/tracemill"
out="$BUILD/demo.sample-v2.json"
echo "== tracemill info examples/demo.pftrace"
"$tm" info examples/demo.pftrace
echo
echo "== tracemill convert --meta examples/demo.meta.json examples/demo.pftrace -o $out"
"$tm" convert --meta examples/demo.meta.json -o "$out" examples/demo.pftrace
bytes=$(stat -c %s "$out")
samples=$(grep -o '"stack_id"' "$out" | wc -l)
threads=$(grep -o '"thread_metadata":.*' "$out" | grep -o '"name"' | wc -l)
echo "wrote $out: $bytes bytes, $samples samples, $threads named threads"
echo "first sample: $(grep -o '"samples":\[{[^}]*}' "$out" | sed 's/"samples":\[//')"
echo "thread_metadata: $(grep -o '"thread_metadata":.*' "$out" | head -c 200)"
echo
echo "== the same trace in every other format (one decode each)"
for f in pprof folded speedscope svg; do
  case $f in pprof) ext=pb.gz ;; folded) ext=folded ;; speedscope) ext=speedscope.json ;; svg) ext=svg ;; esac
  o="$BUILD/demo.$ext"
  "$tm" convert -f "$f" -o "$o" examples/demo.pftrace
  echo "wrote $o ($(stat -c %s "$o") bytes)"
done
echo "hottest stacks (folded, by count):"
sort -t' ' -k2 -nr "$BUILD/demo.folded" | sed -n 1,3p | cut -c1-160
echo "open $BUILD/demo.svg in a browser for the flame graph, or load $BUILD/demo.speedscope.json at speedscope.app"
echo
echo "== SQL over the same trace (Trace Processor's tables)"
"$tm" query --format table examples/demo.pftrace \
  "select t.tid, t.name, count(*) as samples from stack_sample s join stack_sample_task_context c on s.task_context_id = c.id join thread t on c.utid = t.utid group by t.utid order by samples desc"
"$tm" export-sqlite examples/demo.pftrace "$BUILD/demo.db"
echo "wrote $BUILD/demo.db: $(sqlite3 "$BUILD/demo.db" 'select count(*) from stack_profile_callsite') callsites, readable by sqlite3"
echo
echo "== the ingest server: tracemill serve, an envelope posted with curl, read back"
store="$BUILD/demo-store"
rm -rf "$store"
banner="$BUILD/demo-serve.out"
"$tm" serve --listen 127.0.0.1:0 --store "$store" --project 1:e12d836b15bb49d7bbf99e64295d995b >"$banner" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q '^DSN:' "$banner" && break; sleep 0.05; done
cat "$banner"
port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$banner" | grep -o '[0-9]*$')
echo "\$ curl --data-binary @examples/demo.envelope -H 'X-Sentry-Auth: Sentry sentry_key=...' http://127.0.0.1:$port/api/1/envelope/"
curl -sS --fail-with-body --data-binary @examples/demo.envelope \
  -H 'X-Sentry-Auth: Sentry sentry_key=e12d836b15bb49d7bbf99e64295d995b' "http://127.0.0.1:$port/api/1/envelope/"
echo
"$tm" store ls --store "$store"
"$tm" store get c3b09c0608844f558eaf6e65df6b9cdf --store "$store" -o "$BUILD/demo-ingested.json"
echo "stored payload: $(stat -c %s "$BUILD/demo-ingested.json") bytes, the same as tracemill convert wrote: $(cmp -s "$BUILD/demo-ingested.json" "$out" && echo yes || echo NO)"
kill -TERM $server
wait $server
trap - EXIT
