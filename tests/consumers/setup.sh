#!/usr/bin/env bash
# setup.sh — builds the real consumers of tracemill's output once per build
# directory: Google's pprof from Debian's Go sources, a small Go checker that
# runs profile.Parse + CheckValid, and the npm packages speedscope (its
# file-format schema), ajv and playwright-core (npm ci: needs the network).
# `make test` and `make asan` run it before ctest; ctest never does, and the
# consumer tests skip when what they need is not here. Without go or npm
# that part is left out (its tests will skip); a failing build or npm ci
# fails.
# usage: setup.sh BUILD_DIR
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$1"
out="$(cd "$1" && pwd)/consumers"
mkdir -p "$out"
export GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE="$out/gocache" GOFLAGS=-mod=mod
if ! command -v go >/dev/null; then
  echo "consumers: go is not installed: the pprof consumer test will be skipped"
else
  if [ ! -x "$out/pprof" ]; then
    go build -o "$out/pprof" github.com/google/pprof
  fi
  if [ ! -x "$out/pprof_check" ] || [ "$here/pprof_check.go" -nt "$out/pprof_check" ]; then
    go build -o "$out/pprof_check" "$here/pprof_check.go"
  fi
fi
if ! command -v npm >/dev/null; then
  echo "consumers: npm is not installed: the speedscope and SVG consumer tests will be skipped"
elif [ ! -f "$out/node_modules/.tracemill-lock" ] || ! cmp -s "$here/package-lock.json" "$out/node_modules/.tracemill-lock"; then
  cp "$here/package.json" "$here/package-lock.json" "$out/"
  (cd "$out" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$here/package-lock.json" "$out/node_modules/.tracemill-lock"
fi
echo "consumers ready in $out"
