#!/usr/bin/env bash
# exports.sh — the public headers and the shared libraries agree: every
# TM_API function of tracemill.h and tracemill_sql.h is exported by
# libtracemill.so and nothing else is (so -ltracemill users see exactly what
# it defines), and every one of tracemill_record.h is exported by
# libtracemill_record.so (when built) and by no other library.
# usage: exports.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src="$1" build="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0
say() { echo "FAIL: $*" >&2; fail=1; }

# declared HEADER...: the names of the functions declared with TM_API.
declared() {
  cat "$@" | grep -oE '^TM_API [^(]*\(' | grep -oE '[A-Za-z_][A-Za-z0-9_]*\($' | tr -d '(' | sort -u
}
# exported LIB: the functions a shared library exports.
exported() { nm -D --defined-only "$1" | awk '$2 == "T" {print $3}' | sort -u; }

declared "$src/include/tracemill.h" "$src/include/tracemill_sql.h" >"$tmp/lib.h.txt"
declared "$src/include/tracemill_record.h" >"$tmp/record.h.txt"
[ -s "$tmp/lib.h.txt" ] && [ -s "$tmp/record.h.txt" ] || { say "no TM_API declaration found"; exit 1; }
exported "$build/libtracemill.so" >"$tmp/lib.so.txt"

missing=$(comm -23 "$tmp/lib.h.txt" "$tmp/lib.so.txt")
[ -z "$missing" ] || say "declared in tracemill.h/tracemill_sql.h, not exported by libtracemill.so:" $missing
extra=$(comm -13 "$tmp/lib.h.txt" "$tmp/lib.so.txt")
[ -z "$extra" ] || say "exported by libtracemill.so, declared in neither tracemill.h nor tracemill_sql.h:" $extra
stray=$(comm -12 "$tmp/record.h.txt" "$tmp/lib.so.txt")
[ -z "$stray" ] || say "tracemill_record.h's functions exported by libtracemill.so:" $stray
echo "libtracemill.so: $(wc -l <"$tmp/lib.so.txt") functions, as tracemill.h + tracemill_sql.h declare"

if [ -e "$build/libtracemill_record.so" ]; then
  exported "$build/libtracemill_record.so" >"$tmp/record.so.txt"
  missing=$(comm -23 "$tmp/record.h.txt" "$tmp/record.so.txt")
  [ -z "$missing" ] || say "declared in tracemill_record.h, not exported by libtracemill_record.so:" $missing
  echo "libtracemill_record.so: exports the $(wc -l <"$tmp/record.h.txt") functions of tracemill_record.h"
fi
exit $fail
