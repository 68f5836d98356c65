#!/usr/bin/env bash
# require.sh — sourced by the consumer tests: `require_cmd CMD...` and
# `require_file PATH...` end the test as skipped (exit 77, ctest's
# SKIP_RETURN_CODE) with a message saying what is missing and how to get
# it. ctest never installs or downloads: scripts/install-deps.sh installs
# the tools and tests/consumers/setup.sh BUILD_DIR (run by `make test`)
# builds pprof and fetches the npm packages into BUILD_DIR/consumers.
skip() {
  echo "SKIP: $*"
  exit 77
}
require_cmd() {
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null || skip "$c is not installed (scripts/install-deps.sh installs it)"
  done
}
require_file() {
  local f
  for f in "$@"; do
    [ -e "$f" ] || skip "$f is missing (tests/consumers/setup.sh BUILD_DIR sets it up; make test runs it)"
  done
}
