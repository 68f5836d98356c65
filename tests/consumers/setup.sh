#!/usr/bin/env bash
# setup.sh — builds the real consumers of tracemill's output once per build
# directory (a ctest fixture): Google's pprof from Debian's Go sources, a
# small Go checker that runs profile.Parse + CheckValid, and the npm
# packages speedscope (its file-format schema), ajv and playwright-core.
# usage: setup.sh BUILD_DIR
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$1/consumers"
mkdir -p "$out"
export GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE="$out/gocache" GOFLAGS=-mod=mod
if [ ! -x "$out/pprof" ]; then
  go build -o "$out/pprof" github.com/google/pprof
fi
if [ -f "$here/pprof_check.go" ] && [ ! -x "$out/pprof_check" -o "$here/pprof_check.go" -nt "$out/pprof_check" ]; then
  go build -o "$out/pprof_check" "$here/pprof_check.go"
fi
if [ ! -f "$out/node_modules/.tracemill-lock" ] || ! cmp -s "$here/package-lock.json" "$out/node_modules/.tracemill-lock"; then
  cp "$here/package.json" "$here/package-lock.json" "$out/"
  (cd "$out" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$here/package-lock.json" "$out/node_modules/.tracemill-lock"
fi
echo "consumers ready in $out"
