#!/usr/bin/env bash
# run.sh — the ctest entry of the Python package: builds tracemill (the
# pure-Python layer and the extension) into BUILD/python/lib with Debian's
# /usr/bin/python3 against BUILD/libtracemill.a, then runs its pytest suite
# against BUILD/tracemill. Exits 77 (skipped) when that Python lacks pytest
# or setuptools.  usage: run.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$1
BUILD=$(cd "$2" && pwd)
PY=/usr/bin/python3
if ! $PY -c "import pytest, setuptools" 2>/dev/null; then
  echo "python: skipped, $PY lacks pytest or setuptools (scripts/install-deps.sh installs them)"
  exit 77
fi
# A sanitized build (make asan): the extension links the instrumented
# library, so it is built with the sanitizers and their runtimes are
# preloaded into the (uninstrumented) interpreter; Python's own allocations
# are not leak-checked.
if grep -q '^TM_SANITIZE:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null; then
  cc=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
  export CC=$cc CFLAGS="-fsanitize=address,undefined" LDFLAGS="-fsanitize=address,undefined"
  export TRACEMILL_SANITIZED=1 ASAN_OPTIONS=detect_leaks=0
  preload="$($cc -print-file-name=libasan.so):$($cc -print-file-name=libubsan.so)"
fi
cd "$SRC/python"
TRACEMILL_BUILD_DIR=$BUILD $PY setup.py -q build_py --build-lib "$BUILD/python/lib" \
  build_ext --build-lib "$BUILD/python/lib" --build-temp "$BUILD/python/tmp" >/dev/null
cd "$SRC"
TRACEMILL_BUILD_DIR=$BUILD TRACEMILL_CLI=$BUILD/tracemill PYTHONPATH=$BUILD/python/lib PYTHONDONTWRITEBYTECODE=1 LD_PRELOAD=${preload:-} \
  exec $PY -m pytest -q -p no:cacheprovider python/tests
