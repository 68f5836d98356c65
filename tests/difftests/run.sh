#!/usr/bin/env bash
# run.sh — Perfetto's diff tests and our Trace Processor probes against
# `tracemill query --format perfetto`.
#
#   tests/difftests/run.sh [--list] TRACEMILL FIXTURES_DIR
#
# Every folder of FIXTURES_DIR/perfetto-difftests/ (trace.pftrace, query.sql,
# expected.out) and of FIXTURES_DIR/perfetto-probes/ (observed.out instead of
# expected.out) is one test: the query's output must equal the expected one
# the way Perfetto's runner compares, each line stripped of surrounding
# blanks and trailing blank lines ignored. In the probes the value column of
# stats rows named *_duration_ns (wall-clock timings of Trace Processor) is
# masked on both sides. Prints PASS/FAIL per test, a summary, the failures
# and a unified diff for each failing required test and probe; exits 1 if
# one of those fails. --list (or TM_DIFFTESTS_LIST=1) prints only a
# Markdown table of the results, for the README.
set -u

list=${TM_DIFFTESTS_LIST:-0}
if [ "${1:-}" = --list ]; then list=1; shift; fi
if [ $# -ne 2 ]; then
  echo "usage: $0 [--list] TRACEMILL FIXTURES_DIR" >&2
  exit 2
fi
tm=$1 fixtures=$2

required=" Profiling__frame_types Profiling__perf_sample_followers Profiling__perf_sample_timebase_count
  Profiling__stack_sample Profiling__stack_sample_async Profiling__stack_sample_contexts
  Profiling__stack_sample_followers Profiling__stack_sample_inline_callstack
  Profiling__stack_sample_interned_callstack Profiling__stack_sample_session_source
  ParsingTracedStats__data_loss_cause_breakdown ParsingTracedStats__long_trace_mode_bytes_overwritten
  ParsingTracedStats__long_trace_mode_bytes_overwritten_ring_buffer_intent
  ParsingTracedStats__sequence_all_incremental_dropped ParsingTracedStats__sequence_packet_loss
  ParsingTracedStats__sequence_packet_loss_bitmask Tables__filter_stats
  Tables__stats_global_scope_has_null_ids Tables__stats_schema_machine_id_trace_id
  ProfilingHeapGraph__heap_profile_tracker_new_stack ProfilingHeapGraph__heap_profile_tracker_twoheaps
  ProfilingHeapProfiling__heap_profile_dump_max ProfilingHeapProfiling__heap_profile_dump_max_legacy
  ProfilingHeapProfiling__heap_profile_intervals ProfilingHeapProfiling__heap_profile_intervals_frees
  ProfilingHeapProfiling__heap_profile_intervals_legacy ProfilingHeapProfiling__heap_profile_intervals_window
  ProfilingHeapProfiling__heap_profile_jit ProfilingHeapProfiling__heap_profile_window
  ProfilingHeapProfiling__heap_profile_window_legacy
  ProfilingHeapProfiling__heap_profile_deobfuscate ProfilingHeapProfiling__heap_profile_deobfuscate_2
  ProfilingLlvmSymbolizer__no_build_id R8RetraceCompat__horizontal_class_merging R8RetraceCompat__inline_positions
  R8RetraceCompat__method_overload R8RetraceCompat__removed_argument R8RetraceCompat__staticized_method
  R8RetraceCompat__vertical_class_merging Deobfuscation__profile_deobfuscation_default_package
  Deobfuscation__art_oome_stack_sample_deobfuscation
  Stacks__symbolization_candidates_heap_profile
  Stacks__symbolization_candidates_perf_profile "
required=" $(echo $required) " # one line, one blank between names
is_required() { case $required in *" $1 "*) return 0 ;; esac; return 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Perfetto's comparison: strip each line, drop trailing blank lines. With
# mask=1, blank out the value of *_duration_ns stats rows: in each result
# set (a header line after a blank line) find the "name" and "value"
# columns, then rewrite only that field of the matching rows. Fields are
# split as Trace Processor writes them: "..." strings (never escaped) or
# bare numbers.
normalize() { # FILE MASK
  awk -v mask="$2" '
    function split_csv(line, f,    n, rest, end) {
      n = 0
      while (1) {
        n++
        if (substr(line, 1, 1) == "\"") {
          rest = substr(line, 2)
          end = index(rest, "\",")
          if (end == 0) { f[n] = line; return n }
          f[n] = substr(line, 1, end + 1); line = substr(rest, end + 2)
        } else {
          end = index(line, ",")
          if (end == 0) { f[n] = line; return n }
          f[n] = substr(line, 1, end - 1); line = substr(line, end + 1)
        }
      }
    }
    {
      sub(/^[ \t\r]+/, ""); sub(/[ \t\r]+$/, "")
      if ($0 == "") { header = 1; out[++n] = ""; next }
      if (mask) {
        k = split_csv($0, f)
        if (header) {
          name_col = value_col = 0
          for (i = 1; i <= k; i++) {
            if (f[i] == "\"name\"") name_col = i
            if (f[i] == "\"value\"") value_col = i
          }
        } else if (name_col && value_col && k >= value_col && f[name_col] ~ /^"[^"]*_duration_ns"$/) {
          f[value_col] = "<masked>"
          line = f[1]
          for (i = 2; i <= k; i++) line = line "," f[i]
          $0 = line
        }
      }
      header = 0
      out[++n] = $0
    }
    BEGIN { header = 1 }
    END { while (n > 0 && out[n] == "") n--; for (i = 1; i <= n; i++) print out[i] }
  ' "$1"
}

pass=0 total=0 probe_pass=0 probe_total=0 hard_fail=0
failures=() diffs=() rows=()

run_one() { # KIND DIR EXPECTED MASK
  local kind=$1 dir=$2 expected=$3 mask=$4 name
  name=$(basename "$dir")
  local actual="$work/$name.out" ok=1
  if [ ! -f "$dir/$expected" ] || [ ! -f "$dir/query.sql" ] || [ ! -f "$dir/trace.pftrace" ]; then
    ok=0
    echo "missing $expected, query.sql or trace.pftrace" >"$actual"
  elif ! timeout 120 "$tm" query --format perfetto -f "$dir/query.sql" "$dir/trace.pftrace" >"$actual" 2>"$work/$name.err"; then
    ok=0
  fi
  normalize "$actual" "$mask" >"$work/$name.got"
  [ -f "$dir/$expected" ] && normalize "$dir/$expected" "$mask" >"$work/$name.want" || : >"$work/$name.want"
  cmp -s "$work/$name.got" "$work/$name.want" || ok=0
  local must=0
  if [ "$kind" = probe ] || is_required "$name"; then must=1; fi
  if [ "$kind" = probe ]; then probe_total=$((probe_total + 1)); else total=$((total + 1)); fi
  if [ $ok = 1 ]; then
    [ "$kind" = probe ] && probe_pass=$((probe_pass + 1)) || pass=$((pass + 1))
    rows+=("| $name | $kind$([ $must = 1 ] && [ "$kind" != probe ] && echo ', required') | pass |")
    [ "$list" = 1 ] || echo "PASS $name"
    return
  fi
  failures+=("$name$([ $must = 1 ] && echo ' (required)')")
  rows+=("| $name | $kind$([ $must = 1 ] && [ "$kind" != probe ] && echo ', required') | FAIL |")
  [ "$list" = 1 ] || echo "FAIL $name"
  if [ $must = 1 ]; then
    hard_fail=1
    diffs+=("$(diff -u --label "$name/$expected" --label "$name: tracemill" "$work/$name.want" "$work/$name.got";
               [ -s "$work/$name.err" ] && sed 's/^/stderr: /' "$work/$name.err" | head -20)")
  fi
}

for dir in "$fixtures"/perfetto-difftests/*/; do run_one difftest "${dir%/}" expected.out 0; done
for name in $required; do
  [ -d "$fixtures/perfetto-difftests/$name" ] || run_one difftest "$fixtures/perfetto-difftests/$name" expected.out 0
done
for dir in "$fixtures"/perfetto-probes/*/; do run_one probe "${dir%/}" observed.out 1; done

if [ "$list" = 1 ]; then
  echo "| test | kind | result |"
  echo "|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
fi
echo "$pass of $total diff tests pass; $probe_pass of $probe_total probes pass"
if [ ${#failures[@]} -gt 0 ]; then
  echo "failures:"
  printf '  %s\n' "${failures[@]}"
fi
if [ "$list" != 1 ]; then
  for d in "${diffs[@]+"${diffs[@]}"}"; do printf '%s\n\n' "$d"; done
fi
exit $hard_fail
