#!/usr/bin/env bash
# deb.sh — `make deb`: builds the Debian packages of debian/ with
# dpkg-buildpackage -us -uc -b from a copy of the working tree in
# OUT/tracemill-VERSION (the tree itself gets no build files), leaving the
# .deb files in OUT; runs lintian on them (failing on errors and warnings,
# informational tags shown); then unpacks them into a scratch root (dpkg -x)
# and checks what they hold: `tracemill --version`, `tracemill record`
# finding the packaged preload library, examples/convert_to_sample_v2.c
# built with pkg-config against the -dev files (and run on the packaged
# libtracemill.so.0), tests/install/sql_count.c with pkg-config tracemill
# sqlite3, tests/record_target.c recording itself with pkg-config
# tracemill_record, and find_package(tracemill) (tests/install/CMakeLists.txt).
# usage: deb.sh [OUT] (OUT: build-deb)
set -euo pipefail
cd "$(dirname "$0")/.."
src="$(pwd)"
out="$(mkdir -p "${1:-build-deb}" && cd "${1:-build-deb}" && pwd)"
fail() { echo "deb: FAIL: $*" >&2; exit 1; }
ok() { echo "deb: ok: $*"; }

version="$(dpkg-parsechangelog -S Version)"
upstream="${version%-*}"
tree="$out/tracemill-$upstream"
rm -rf "$tree" "$out"/*.deb "$out"/*.changes "$out"/*.buildinfo
mkdir -p "$tree"
# The working tree as git sees it (tracked and untracked, not ignored), or
# everything but build directories outside a git checkout.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    tar --null -T - -cf - | tar -xf - -C "$tree"
else
  tar --exclude='./build*' --exclude=./.git -cf - . | tar -xf - -C "$tree"
fi

(cd "$tree" && DEB_BUILD_OPTIONS="parallel=${JOBS:-2} ${DEB_BUILD_OPTIONS:-}" \
  dpkg-buildpackage -us -uc -b) >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; fail "dpkg-buildpackage (log: $out/build.log)"; }
changes="$(ls "$out"/tracemill_"$version"_*.changes)"
ok "built $(cd "$out" && ls ./*.deb | tr '\n' ' ')"

# lintian: errors and warnings fail, info tags are shown; debian/*.lintian-overrides say why
# each overridden tag does not apply.
lintian --info --display-info --fail-on error,warning "$changes" | tee "$out/lintian.log" ||
  fail "lintian reports errors or warnings ($out/lintian.log)"
ok "lintian: no errors or warnings ($(grep -c '^I:' "$out/lintian.log" || true) informational tags)"

# The packages unpacked into a scratch root, used from there.
root="$out/root"
rm -rf "$root"
for deb in "$out"/*.deb; do
  case "$deb" in *-dbgsym_*) continue ;; esac
  dpkg -x "$deb" "$root"
done
ma="$(dpkg-architecture -qDEB_HOST_MULTIARCH)"
libdir="$root/usr/lib/$ma"
"$root/usr/bin/tracemill" --version | grep -qx "tracemill $upstream" || fail "tracemill --version is not $upstream"
ok "tracemill --version: $upstream"
if [ -e "$libdir/tracemill/libtracemill_record.so" ]; then
  (cd "$out" && "$root/usr/bin/tracemill" record --backend signal -o "$out/rec.pftrace" -- true) >"$out/rec.log" 2>&1 || true
  ! grep -q "cannot find" "$out/rec.log" || { cat "$out/rec.log"; fail "the packaged tracemill record"; }
  ok "tracemill record finds the packaged libtracemill_record.so"
fi

# pkg-config against the unpacked -dev files: the sysroot prefixes their /usr.
export PKG_CONFIG_SYSROOT_DIR="$root"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc="${CC:-cc}"
# shellcheck disable=SC2046
"$cc" -o "$out/example" "$src/examples/convert_to_sample_v2.c" $(pkg-config --cflags --libs tracemill) ||
  fail "building the example with pkg-config tracemill"
LD_LIBRARY_PATH="$libdir" ldd "$out/example" >"$out/ldd.txt"
grep -q "libtracemill.so.0 => $libdir/" "$out/ldd.txt" || fail "the example does not load the packaged libtracemill.so.0"
LD_LIBRARY_PATH="$libdir" "$out/example" "$src/examples/demo.pftrace" >"$out/example.json" || fail "the example failed"
grep -q '"version":"2","profile":{"samples":\[{' "$out/example.json" || fail "the example wrote no Sample v2 chunk"
ok "examples/convert_to_sample_v2.c with pkg-config tracemill, run on the packaged libtracemill.so.0"
# shellcheck disable=SC2046
"$cc" -o "$out/sql_count" "$src/tests/install/sql_count.c" $(pkg-config --cflags --libs tracemill sqlite3) ||
  fail "building sql_count.c with pkg-config tracemill sqlite3"
LD_LIBRARY_PATH="$libdir" "$out/sql_count" "$src/examples/demo.pftrace" | grep -qE '^perf_sample [1-9]' ||
  fail "sql_count on the packaged library"
ok "tests/install/sql_count.c with pkg-config tracemill sqlite3"
if [ -e "$libdir/libtracemill_record.a" ]; then
  # shellcheck disable=SC2046
  "$cc" -DRECORD_TARGET_API -o "$out/record_target" "$src/tests/record_target.c" \
    $(pkg-config --cflags --libs tracemill_record) || fail "building record_target.c with pkg-config tracemill_record"
  "$out/record_target" --cpu-seconds 0.3 -o "$out/self.pftrace" >/dev/null || fail "record_target recording itself"
  LD_LIBRARY_PATH="$libdir" "$root/usr/bin/tracemill" convert -f folded "$out/self.pftrace" | grep -q . ||
    fail "no samples in the trace record_target recorded"
  ok "tests/record_target.c with pkg-config tracemill_record (libtracemill_record.a alone) records itself"
fi
unset PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_PATH
cmake -S "$src/tests/install" -B "$out/fp" -DCMAKE_PREFIX_PATH="$root/usr" \
  -DEXAMPLE_SOURCE="$src/examples/convert_to_sample_v2.c" >"$out/fp.log" 2>&1 &&
  cmake --build "$out/fp" >>"$out/fp.log" 2>&1 || { cat "$out/fp.log"; fail "find_package(tracemill) against the packages"; }
LD_LIBRARY_PATH="$libdir" "$out/fp/example_shared" "$src/examples/demo.pftrace" | grep -q '"version":"2"' ||
  fail "find_package(tracemill): tracemill::tracemill"
"$out/fp/example_static" "$src/examples/demo.pftrace" | grep -q '"version":"2"' ||
  fail "find_package(tracemill): tracemill::tracemill_static"
ok "find_package(tracemill) against the packages, shared and static"
