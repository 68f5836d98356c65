#!/usr/bin/env bash
# run.sh — the installed tree works for a C developer: `cmake --install`
# of BUILD_DIR into a temporary prefix, then examples/convert_to_sample_v2.c
# built against that prefix with pkg-config (shared, and static with
# --static) and with find_package(tracemill) (tests/install/CMakeLists.txt),
# each run on examples/demo.pftrace; tests/install/sql_count.c (a client of
# tracemill_sql.h) with pkg-config tracemill sqlite3; with the recorder,
# tests/record_target.c recording itself through tracemill_record.h with
# libtracemill_record.a alone (pkg-config tracemill_record and
# tracemill::tracemill_record_static); also the files a package ships
# (SONAME links, headers, man page, completion, programs) and
# `tracemill -V`.
# usage: run.sh SOURCE_DIR BUILD_DIR [CFLAGS] (CFLAGS: for a sanitized build,
# -fsanitize=...; CC: the compiler, cc by default)
set -euo pipefail
src="$(cd "$1" && pwd)" build="$(cd "$2" && pwd)" cflags="${3:-}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }
ok "cmake --install --prefix $prefix"
libdir="$(dirname "$(find "$prefix" -name tracemill.pc -path '*/pkgconfig/*' | head -1)")/.."
[ -d "$libdir" ] || fail "no tracemill.pc installed"
libdir="$(cd "$libdir" && pwd)"
version="$(sed -n 's/^Version: //p' "$libdir/pkgconfig/tracemill.pc")"
major="${version%%.*}"

# What a package ships.
for f in include/tracemill.h include/tracemill_sql.h include/tracemill_record.h bin/tracemill share/man/man1/tracemill.1 \
         share/bash-completion/completions/tracemill; do
  [ -e "$prefix/$f" ] || fail "$f not installed"
done
for f in libtracemill.a libtracemill.so "libtracemill.so.$major" "libtracemill.so.$version" \
         cmake/tracemill/tracemillConfig.cmake cmake/tracemill/tracemillConfigVersion.cmake \
         cmake/tracemill/tracemillTargets.cmake; do
  [ -e "$libdir/$f" ] || fail "${libdir#$prefix/}/$f not installed"
done
[ "$(readlink "$libdir/libtracemill.so")" = "libtracemill.so.$major" ] || fail "libtracemill.so does not point at .so.$major"
soname="$(objdump -p "$libdir/libtracemill.so.$version" | awk '$1 == "SONAME" {print $2}')"
[ "$soname" = "libtracemill.so.$major" ] || fail "SONAME is '$soname', not libtracemill.so.$major"
ok "libtracemill.so.$version, SONAME $soname, headers, man page, completion, CMake package"
[ "$("$prefix/bin/tracemill" -V)" = "tracemill $version" ] || fail "tracemill -V does not say $version"
ok "tracemill -V: $version"
if [ -e "$build/tracemill-serve" ]; then
  [ -x "$prefix/bin/tracemill-serve" ] || fail "tracemill-serve not installed"
fi
if [ -e "$build/libtracemill_record.so" ]; then
  [ -e "$libdir/libtracemill_record.so" ] && [ -e "$libdir/libtracemill_record.a" ] ||
    fail "libtracemill_record.so/.a not installed"
  ok "tracemill-serve, libtracemill_record.so and .a"
  if [ -z "$cflags" ]; then # (a sanitized recorder cannot be preloaded into a plain program)
    # the installed tracemill finds the installed recorder (PREFIX/bin/../LIBDIR)
    (cd "$tmp" && "$prefix/bin/tracemill" record --backend signal -o rec.pftrace -- true) >"$tmp/rec.out" 2>&1 || true
    ! grep -q "cannot find" "$tmp/rec.out" || { cat "$tmp/rec.out"; fail "installed tracemill record"; }
    ok "installed tracemill record finds the installed libtracemill_record.so"
  fi
fi
if [ -e "$build/tracemill-record-perf" ]; then
  [ -x "$prefix/bin/tracemill-record-perf" ] || fail "tracemill-record-perf not installed beside tracemill"
  ok "tracemill-record-perf"
fi

# check_example BINARY HOW: runs it on the demo trace, a Sample v2 chunk out.
check_example() {
  "$1" "$src/examples/demo.pftrace" >"$tmp/out.json" || fail "$2: the example failed"
  grep -q '"version":"2","profile":{"samples":\[{' "$tmp/out.json" || fail "$2: not a Sample v2 chunk"
  ok "$2: $(stat -c %s "$tmp/out.json") bytes of Sample v2"
}
# (ldd's output through a file: grep -q ending early would make pipefail fail)
needs_so() { ldd "$1" >"$tmp/ldd" && grep -q "libtracemill.so.$major => $libdir/" "$tmp/ldd"; }
loads_no_tracemill() { ldd "$1" >"$tmp/ldd" && ! grep -q libtracemill "$tmp/ldd"; }

export PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
cc="${CC:-cc}"
ex="$src/examples/convert_to_sample_v2.c"
# shared, found at run time through the RPATH a packager would not set (LD_LIBRARY_PATH here)
# shellcheck disable=SC2046
"$cc" $cflags -o "$tmp/ex_shared" "$ex" $(pkg-config --cflags --libs tracemill) || fail "pkg-config shared build"
LD_LIBRARY_PATH="$libdir" needs_so "$tmp/ex_shared" || fail "pkg-config shared build does not load libtracemill.so.$major"
LD_LIBRARY_PATH="$libdir" check_example "$tmp/ex_shared" "pkg-config --cflags --libs tracemill (shared)"
# static: the archive by name, then what Requires.private/Libs.private add
# shellcheck disable=SC2046
"$cc" $cflags -o "$tmp/ex_static" "$ex" $(pkg-config --cflags tracemill) \
  $(pkg-config --static --libs tracemill | sed 's/-ltracemill\b/-l:libtracemill.a/') || fail "pkg-config static build"
loads_no_tracemill "$tmp/ex_static" || fail "static build still loads libtracemill.so"
check_example "$tmp/ex_static" "pkg-config --static --libs tracemill (static)"

# tracemill_sql.h: tm_db_* from libtracemill, statements run through SQLite's own API.
# shellcheck disable=SC2046
"$cc" $cflags -o "$tmp/sql_count" "$src/tests/install/sql_count.c" $(pkg-config --cflags --libs tracemill sqlite3) ||
  fail "pkg-config tracemill sqlite3 build of sql_count.c"
LD_LIBRARY_PATH="$libdir" "$tmp/sql_count" "$src/examples/demo.pftrace" >"$tmp/sql.out" || fail "sql_count failed"
grep -qE '^perf_sample [1-9][0-9]*$' "$tmp/sql.out" || fail "sql_count: $(cat "$tmp/sql.out")"
ok "tracemill_sql.h with pkg-config tracemill sqlite3: $(cat "$tmp/sql.out")"

# tracemill_record.h: libtracemill_record.a stands alone, exporting tm_recorder_* only.
record=""
if [ -e "$libdir/libtracemill_record.a" ]; then
  record="$src/tests/record_target.c"
  extra=$(nm -g --defined-only "$libdir/libtracemill_record.a" | awk 'NF == 3 {print $3}' | grep -v '^tm_recorder_' || true)
  [ -z "$extra" ] || fail "libtracemill_record.a defines more than tm_recorder_*: $extra"
  # shellcheck disable=SC2046
  "$cc" $cflags -DRECORD_TARGET_API -o "$tmp/record_pc" "$record" $(pkg-config --cflags --libs tracemill_record) ||
    fail "pkg-config tracemill_record build of record_target.c"
  loads_no_tracemill "$tmp/record_pc" || fail "pkg-config tracemill_record: the program loads a libtracemill library"
fi
# check_record BINARY HOW: the program records itself; tracemill reads the trace.
check_record() {
  "$1" --cpu-seconds 0.3 -o "$tmp/self.pftrace" >"$tmp/self.out" || fail "$2: the recording program failed"
  "$prefix/bin/tracemill" convert -f folded -o "$tmp/self.folded" "$tmp/self.pftrace" || fail "$2: unreadable trace"
  [ -s "$tmp/self.folded" ] || fail "$2: no samples recorded"
  ok "$2: $(wc -l <"$tmp/self.folded") stacks recorded by libtracemill_record.a alone"
}
[ -z "$record" ] || check_record "$tmp/record_pc" "pkg-config --cflags --libs tracemill_record"

# find_package(tracemill): a CMake project outside the tree.
cmake -S "$src/tests/install" -B "$tmp/fp" -DCMAKE_PREFIX_PATH="$prefix" -DEXAMPLE_SOURCE="$ex" \
  -DRECORD_SOURCE="$record" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$cflags" \
  >"$tmp/fp.log" 2>&1 || { cat "$tmp/fp.log"; fail "find_package(tracemill): configure"; }
cmake --build "$tmp/fp" >>"$tmp/fp.log" 2>&1 || { cat "$tmp/fp.log"; fail "find_package(tracemill): build"; }
LD_LIBRARY_PATH="$libdir" needs_so "$tmp/fp/example_shared" || fail "tracemill::tracemill is not the shared library"
loads_no_tracemill "$tmp/fp/example_static" || fail "tracemill::tracemill_static loads libtracemill.so"
check_example "$tmp/fp/example_shared" "find_package(tracemill), tracemill::tracemill"
check_example "$tmp/fp/example_static" "find_package(tracemill), tracemill::tracemill_static"
if [ -n "$record" ]; then
  [ -x "$tmp/fp/record_static" ] || fail "find_package(tracemill): no tracemill::tracemill_record_static"
  loads_no_tracemill "$tmp/fp/record_static" || fail "tracemill::tracemill_record_static loads a libtracemill library"
  check_record "$tmp/fp/record_static" "find_package(tracemill), tracemill::tracemill_record_static"
fi
