#!/usr/bin/env bash
# test_pprof.sh — tracemill's pprof output read by the real consumers: Go's
# profile package (pprof_check: Parse, CheckValid, ids, labels, timestamps)
# and Google's pprof command (-raw, -top, -tagfocus). Counts are checked
# against what tracemill says about the same trace elsewhere: `info --json`
# (samples kept) and the Sample v2 output (samples per thread, leaf
# functions). Also `convert --per-thread -f pprof -o DIR`.
# usage: test_pprof.sh CLI SOURCE_DIR BUILD_DIR (exit 77, skipped, when its tools or
# BUILD_DIR/consumers are absent: see require.sh)
set -euo pipefail
cli="$1" src="$2" build="$3"
pprof="$build/consumers/pprof" check="$build/consumers/pprof_check"
source "$src/tests/consumers/require.sh"
require_cmd jq node
require_file "$pprof" "$check"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export PPROF_TMPDIR="$tmp" PPROF_BINARY_PATH=/nonexistent HOME="$tmp"

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }
fact() { awk -v k="$1 " 'index($0, k) == 1 {print substr($0, length(k) + 1); exit}' "$2"; } # fact KEY FILE

# Sample v2 JSON on stdin -> "thread <tid> <count>", "leaf <name> <count>"
# and "tleaf <tid> <name> <count>" (samples with that leaf function).
summarise_v2() {
  node -e '
    let s = ""; process.stdin.on("data", d => s += d).on("end", () => {
      const p = JSON.parse(s).profile, threads = {}, leaves = {}, tleaves = {};
      for (const x of p.samples) {
        threads[x.thread_id] = (threads[x.thread_id] || 0) + 1;
        const st = p.stacks[x.stack_id];
        if (!st.length) continue;
        const f = p.frames[st[0]];
        const name = f.module ? f.module + "." + f.function : f.function;
        leaves[name] = (leaves[name] || 0) + 1;
        const k = x.thread_id + " " + name;
        tleaves[k] = (tleaves[k] || 0) + 1;
      }
      for (const k in tleaves) console.log("tleaf " + k + " " + tleaves[k]);
      for (const t in threads) console.log("thread " + t + " " + threads[t]);
      for (const l in leaves) console.log("leaf " + l + " " + leaves[l]);
    });'
}

# ---- one trace: pprof_check facts against info --json and Sample v2 ----
check_trace() { # TRACE NAME
  local trace="$1" name="$2"
  "$cli" convert -f pprof -o "$tmp/$name.pb.gz" "$trace"
  "$check" "$tmp/$name.pb.gz" > "$tmp/$name.facts" || fail "$name: pprof_check rejected the file"
  local kept samples
  kept=$("$cli" info --json "$trace" | jq '.samples.kept')
  samples=$(fact samples "$tmp/$name.facts")
  [ "$samples" = "$kept" ] || fail "$name: $samples samples, info --json says $kept"
  [ "$(fact sample_types "$tmp/$name.facts")" = "samples/count,cpu/nanoseconds" ] || fail "$name: sample types"
  [ "$(fact "sum samples/count" "$tmp/$name.facts")" = "$kept" ] || fail "$name: sum of samples/count"
  local period cpu want_default=cpu
  period=$(fact period "$tmp/$name.facts")
  cpu=$(fact "sum cpu/nanoseconds" "$tmp/$name.facts")
  [ "$period" -gt 0 ] || want_default=samples # every cpu value is 0: pprof shows the counts
  [ "$(fact default_sample_type "$tmp/$name.facts")" = $want_default ] || fail "$name: default sample type"
  if [ "$period" -gt 0 ]; then [ "$cpu" -gt 0 ] || fail "$name: no cpu time"
  else [ "$cpu" = 0 ] && grep -q '^comment period: unknown' "$tmp/$name.facts" || fail "$name: period 0 unexplained"; fi
  [ "$(fact timed_samples "$tmp/$name.facts")" = "$kept" ] || fail "$name: every sample has a timestamp"
  # samples per thread match Sample v2's
  "$cli" convert "$trace" | summarise_v2 > "$tmp/$name.v2"
  grep '^thread ' "$tmp/$name.v2" | sort > "$tmp/$name.v2threads"
  grep '^thread ' "$tmp/$name.facts" | awk '{print "thread", $2, $NF}' | sort > "$tmp/$name.ppthreads"
  diff "$tmp/$name.v2threads" "$tmp/$name.ppthreads" || fail "$name: samples per thread differ from Sample v2"
  # the raw uncompressed form carries the same profile
  "$cli" convert -f pprof --uncompressed -o "$tmp/$name.pb" "$trace"
  "$check" "$tmp/$name.pb" > "$tmp/$name.rawfacts"
  diff "$tmp/$name.facts" "$tmp/$name.rawfacts" || fail "$name: gzip and raw profiles differ"
  ok "$name: $samples samples (= info --json), period $period ns, threads match Sample v2, raw = gzip"
}

check_trace "$src/examples/demo.pftrace" demo
check_trace "$src/tests/fixtures/relay-compat/multi_sequence.pftrace" multi_sequence
check_trace "$src/tests/fixtures/relay-compat/java_frame_splitting.pftrace" java_frame_splitting

# ---- Google's pprof on the demo ----
demo="$tmp/demo.pb.gz"
total=$(fact samples "$tmp/demo.facts")
"$pprof" -raw "$demo" > "$tmp/raw.txt" 2>/dev/null
n_raw=$(grep -c 'thread_name:\[' "$tmp/raw.txt")
[ "$n_raw" = "$total" ] || fail "pprof -raw lists $n_raw samples, want $total"
grep -q '^PeriodType: cpu nanoseconds' "$tmp/raw.txt" || fail "pprof -raw: period type"
grep -q 'inferred' "$tmp/raw.txt" || fail "pprof -raw: the period comment"
ok "pprof -raw: $n_raw samples, period type, comments"

# -top in samples: the flat count of the top functions = samples with that leaf in Sample v2
"$pprof" -top -symbolize=none -sample_index=samples -nodecount=5 "$demo" > "$tmp/top.txt" 2>/dev/null
grep -q "Total samples = $total\b" "$tmp/top.txt" || { cat "$tmp/top.txt"; fail "pprof -top: total samples"; }
rows=$(awk '$1 ~ /^[0-9]+$/ && $2 ~ /%$/ {print}' "$tmp/top.txt")
[ -n "$rows" ] || fail "pprof -top printed no rows"
while read -r flat _ _ _ _ fn; do
  want=$(awk -v f="$fn" '$1 == "leaf" && $2 == f {print $3}' "$tmp/demo.v2")
  [ "$flat" = "${want:-0}" ] || fail "pprof -top: $fn flat $flat, Sample v2 has it as leaf of ${want:-0} samples"
done <<< "$rows"
ok "pprof -top: total $total, flat counts of the top 5 match Sample v2 leaves"

# -tagfocus by thread name and by thread id
name=$(grep '^thread ' "$tmp/demo.facts" | awk '$3 != "main" {print $3; exit}')
tid_name_count=$(grep '^thread ' "$tmp/demo.facts" | awk -v n="$name" '$3 == n {print $2, $NF; exit}')
tid=${tid_name_count% *} count=${tid_name_count#* }
# (the total stays the whole profile's: the shown nodes' flat counts add up to the focused samples)
focus_top() { "$pprof" -top -symbolize=none -sample_index=samples -nodefraction=0 -nodecount=1000000 -tagfocus="$1" "$demo" 2>/dev/null; }
focus_top "thread_name=$name" > "$tmp/tf1.txt"
grep -q "Showing nodes accounting for $count," "$tmp/tf1.txt" \
  || { sed -n 8,12p "$tmp/tf1.txt"; fail "-tagfocus=thread_name=$name: want $count samples"; }
focus_top "thread_id=$tid" > "$tmp/tf2.txt"
grep -q "Showing nodes accounting for $count," "$tmp/tf2.txt" \
  || { sed -n 8,12p "$tmp/tf2.txt"; fail "-tagfocus=thread_id=$tid: want $count samples"; }
# and the focused flat counts are that thread's leaves in Sample v2
for tf in "$tmp/tf1.txt" "$tmp/tf2.txt"; do
  awk '$1 ~ /^[0-9]+$/ && $2 ~ /%$/ && n++ < 10 {print $1, $6}' "$tf" | while read -r flat fn; do
    want=$(awk -v t="$tid" -v f="$fn" '$1 == "tleaf" && $2 == t && $3 == f {print $4}' "$tmp/demo.v2")
    [ "$flat" = "${want:-0}" ] || fail "-tagfocus: $fn flat $flat, thread $tid has it as leaf of ${want:-0} samples"
  done
done
ok "pprof -tagfocus: thread_name=$name and thread_id=$tid select $count samples, leaves as in Sample v2"

# ---- --per-thread: one valid file per thread, counts adding up ----
"$cli" convert --per-thread -f pprof -o "$tmp/per" "$src/examples/demo.pftrace" 2>/dev/null
n_files=0 sum=0
for f in "$tmp/per"/*.pb.gz; do
  "$check" "$f" > "$f.facts" || fail "per-thread: $f rejected"
  s=$(fact samples "$f.facts")
  [ "$s" -gt 0 ] || fail "per-thread: $f has no samples"
  [ "$(grep -c '^thread ' "$f.facts")" = 1 ] || fail "per-thread: $f holds more than one thread"
  tid_of_file=$(basename "$f" | cut -d- -f1 | cut -d. -f1)
  grep -q "^thread $tid_of_file " "$f.facts" || fail "per-thread: $f is not thread $tid_of_file"
  n_files=$((n_files + 1)) sum=$((sum + s))
done
n_threads=$(grep -c '^thread ' "$tmp/demo.facts")
[ "$n_files" = "$n_threads" ] || fail "per-thread: $n_files files for $n_threads threads"
[ "$sum" = "$total" ] || fail "per-thread: $sum samples in all files, want $total"
ok "--per-thread: $n_files files, one thread each, $sum samples in all"
echo "test_pprof: all checks passed"
