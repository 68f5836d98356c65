#!/usr/bin/env bash
# checksrc.sh — style rules enforced by a script, not by review:
#  1. every C source and header opens with a comment saying what it owns,
#     and so does every Python file and shell script of python/;
#  2. no malloc/calloc/realloc/free in src/ outside common/alloc.c, and none
#     of strcpy, strcat, sprintf, atoi, strtok, gets in src/, cli/, server/
#     and record/;
#  3. src/'s folders are layers whose includes point one way:
#     common <- wire <- perfetto <- profile <- export, and perfetto <- tp
#     <- symbolize;
#     profile and tp never include each other, export never sees perfetto;
#  4. the CLI and examples include only the public headers tracemill.h and
#     tracemill_sql.h (and cli.h; cli_serve.c also server/server.h), server/
#     only tracemill.h, record/ tracemill.h and tracemill_record.h plus the
#     wire writer (wire/pb_write.h, common/base.h) and the Perfetto field
#     numbers (perfetto/fields.h), and the Python extension (python/src/)
#     only tracemill.h and tracemill_sql.h;
#  5. libtracemill exports only tm_* symbols, libtracemill_record only
#     tm_recorder_* and the allocation functions its heap profiler
#     interposes (malloc family, C++ operator new and delete: _Znw/_Zna,
#     _Zdl/_Zda) (needs the build dir); debian/libtracemill0.symbols lists
#     exactly the symbols libtracemill.so exports;
#  6. src/ names protobuf field numbers (perfetto/fields.h): no `case 66:`,
#     no `f.num == 3` with a bare number.
set -u
BUILD=${1:-build}
cd "$(dirname "$0")/.."
fail=0
say() { echo "checksrc: $*"; fail=1; }

for f in $(ls src/*/*.[ch] cli/*.[ch] server/*.[ch] record/*.[ch] include/*.h tests/*.[ch] tests/*.cpp tests/install/*.c bench/*.c examples/*.c fuzz/*.c python/src/*.c 2>/dev/null); do
  first=$(head -c 2 "$f")
  [ "$first" = "/*" ] || [ "$first" = "//" ] || say "$f: must open with a comment saying what it owns"
done

for f in $(ls python/*.py python/tracemill/*.py python/tracemill/*.pyi python/tests/*.py python/tests/*.sh 2>/dev/null); do
  line=$(head -n 1 "$f")
  [ "${line:0:1}" = "#" ] || say "$f: must open with a comment saying what it owns"
done

for f in src/*/*.c src/*/*.h; do
  [ "$f" = src/common/alloc.c ] && continue
  grep -nE '(^|[^_a-z])(malloc|calloc|realloc|free)[[:space:]]*\(' "$f" | grep -vE 'tm_mem_|_fn\(|z_free|free_fn' \
    | sed "s|^|checksrc: $f: direct allocation (use tm_mem_* from alloc.h): |" | grep . && fail=1
done
grep -nE '(^|[^_a-z])(strcpy|strcat|sprintf|atoi|strtok|gets)[[:space:]]*\(' src/*/*.[ch] cli/*.[ch] server/*.[ch] record/*.[ch] \
  | sed 's|^|checksrc: banned call: |' | grep . && fail=1

# Layers of src/: the folders each one may include from.
declare -A layer_deps=(
  [common]="common" [wire]="common wire" [perfetto]="common wire perfetto"
  [profile]="common wire perfetto profile" [export]="common wire profile export"
  [tp]="common wire perfetto tp" [symbolize]="common wire perfetto tp symbolize")
for dir in src/*/; do
  layer=$(basename "$dir")
  deps=${layer_deps[$layer]-}
  [ -n "$deps" ] || { say "src/$layer: not a known layer (add it to checksrc.sh)"; continue; }
  allowed="\"(tracemill(_sql)?\.h|($(echo "$deps" | tr ' ' '|'))/[a-z_0-9]+\.h)\""
  grep -nE '#include "' "$dir"*.[ch] | grep -vE "$allowed" \
    | sed "s|^|checksrc: layer $layer may include only $deps: |" | grep . && fail=1
done

for f in cli/*.c examples/*.c; do
  allowed='"(tracemill|tracemill_sql|cli)\.h"'
  [ "$f" = cli/cli_serve.c ] && allowed='"(tracemill|tracemill_sql|cli|server)\.h"' # serve and store drive the server layer
  grep -nE '#include "' "$f" | grep -vE "$allowed" \
    | sed "s|^|checksrc: $f: only the public header: |" | grep . && fail=1
done
# The server layer sits above the library: the public header, never src/.
grep -nE '#include "' server/*.[ch] | grep -vE '"(tracemill|server)\.h"' \
  | sed 's|^|checksrc: server may include only tracemill.h and server.h: |' | grep . && fail=1
# The Python extension is a client of the library: the public header only.
grep -nE '#include "' python/src/*.c | grep -vE '"tracemill(_sql)?\.h"' \
  | sed 's|^|checksrc: the Python extension may include only tracemill.h and tracemill_sql.h: |' | grep . && fail=1
# The recorder also sits above the library; it borrows only the protobuf writer.
grep -nE '#include "' record/*.[ch] | grep -vE '"(tracemill|tracemill_record|record|wire/pb_write|common/base|perfetto/fields)\.h"' \
  | sed 's|^|checksrc: record may include only tracemill.h, tracemill_record.h, record.h, wire/pb_write.h, common/base.h and perfetto/fields.h: |' | grep . && fail=1

grep -nE '^\s*case [0-9]+:|\.num *[!=]= *[0-9]+\b' src/*/*.c \
  | sed 's|^|checksrc: a field number must be named (src/perfetto/fields.h): |' | grep . && fail=1

if [ -f "$BUILD/libtracemill.so" ]; then
  bad=$(nm -D --defined-only "$BUILD/libtracemill.so" | awk '$2 ~ /^[TDBR]$/ {print $3}' | grep -v '^tm_')
  [ -z "$bad" ] || say "libtracemill.so exports non-tm_ symbols: $bad"
  bad=$(nm "$BUILD/libtracemill.a" 2>/dev/null | awk '$2 == "T" {print $3}' | grep -v '^tm_')
  [ -z "$bad" ] || say "libtracemill.a defines non-tm_ global functions: $bad"
  # The Debian symbols file must list exactly what the library exports, or
  # dpkg-gensymbols adds the difference and lintian refuses the package.
  exported=$(nm -D --defined-only "$BUILD/libtracemill.so" | awk '$2 ~ /^[TDBR]$/ {print $3}' | sort -u)
  listed=$(awk '/^ tm_/ {sub(/@.*/, "", $1); print $1}' debian/libtracemill0.symbols | sort -u)
  diff=$(diff <(echo "$exported") <(echo "$listed") | grep '^[<>]' | sed 's/^</exported but not in debian\/libtracemill0.symbols:/; s/^>/in debian\/libtracemill0.symbols but not exported:/')
  [ -z "$diff" ] || say "$diff"
fi
if [ -f "$BUILD/libtracemill_record.so" ]; then
  bad=$(nm -D --defined-only "$BUILD/libtracemill_record.so" | awk '$2 ~ /^[TDBR]$/ {print $3}' \
        | grep -vE '^(tm_recorder_|_init$|_fini$|_exit$|_Exit$|dlclose$|exec(ve|vpe|v|vp|l|lp|le)$|fexecve$|sigaction$|signal$|sigset$)' \
        | grep -vE '^(malloc|free|calloc|realloc|reallocarray|posix_memalign|aligned_alloc|memalign|valloc|pvalloc|_Zn[wa]m.*|_Zd[la]Pv.*)$')
  [ -z "$bad" ] || say "libtracemill_record.so exports more than tm_recorder_*, the interposed allocators, _exit/_Exit, dlclose, the exec functions and sigaction/signal/sigset: $bad"
fi

[ $fail -eq 0 ] && echo "checksrc: ok"
exit $fail
