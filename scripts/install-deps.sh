#!/usr/bin/env bash
# install-deps.sh — installs the Debian packages tracemill's build and tests
# need (clang and its libFuzzer runtime for make fuzz, valgrind for the
# time-bound tests; for the consumer tests too: Go and pprof's sources, xmllint,
# Chromium, Node.js, jq; for the Python package /usr/bin/python3's headers,
# setuptools, pytest, numpy and pandas; the Sentry SDK that test_serve_sdk
# drives the server with), only when one is missing
# (idempotent). Run by `make deps`, `make test`, `make demo`, `make asan` and
# the fuzz targets, never by a plain `make`. A library-only build (see
# README, Install) needs only cmake, pkg-config, zlib, jansson, libdeflate,
# SQLite and libzstd.
# With --deb (`make deb`): only what building the Debian packages needs,
# debhelper, devscripts and lintian, and debian/control's Build-Depends
# (apt-get build-dep ./ when dpkg-checkbuilddeps finds one missing).
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if [ "${1:-}" = --deb ]; then
  missing=()
  for p in dpkg-dev debhelper devscripts lintian; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ] || ! dpkg-checkbuilddeps >/dev/null 2>&1; then
    echo "install-deps: installing ${missing[*]} and debian/control's Build-Depends"
    $SUDO apt-get update -qq
    [ ${#missing[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get build-dep -y -qq ./ >/dev/null
  fi
  exit 0
fi
pkgs=(build-essential cmake pkg-config zlib1g-dev libjansson-dev libdeflate-dev libcriterion-dev
      libsqlite3-dev sqlite3 libedit-dev
      librdkafka-dev libmsgpack-dev libyaml-dev libzstd-dev libbrotli-dev curl
      libcurl4-openssl-dev libunwind-dev libdw-dev clang libclang-rt-dev valgrind
      golang-go golang-github-google-pprof-dev libxml2-utils chromium jq
      python3-dev python3-setuptools python3-pytest python3-numpy python3-pandas python3-sentry-sdk)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm (speedscope's schema, ajv, playwright-core): Debian's
# packages unless a Node.js with npm is already there (nodesource bundles it).
command -v npm >/dev/null || missing+=(nodejs npm)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
