#!/usr/bin/env bash
# bench_serve.sh — the benchmark behind `make bench-serve` (not part of
# `make test`): `tracemill serve` on loopback under load_serve (keep-alive
# connections posting ~100 KB Android profile_chunk envelopes, metadata +
# Perfetto trace) in two scenarios: (1) the local store (SQLite, group
# commit, fsync before 200) and (2) librdkafka's mock cluster (3 brokers,
# acks=all before 200). Prints each run's figures and a summary against
# the targets of issue 5: >= 2000 chunks/s with p99 <= 50 ms into Kafka,
# >= 1000 chunks/s into the local store; and the server's CPU per chunk
# against issue 17's 0.5 ms (what 2000 chunks/s on 2 cores allows), split
# by its threads (connections: HTTP, conversion and hand-over; the store's
# writer; librdkafka's). Builds nothing: expects
# BUILD/tracemill, BUILD/load_serve and BUILD/mock_kafka.
# Environment: CONNECTIONS (default 8, the best on a 2-core machine), DURATION (s, default 10), WARMUP
# (s, default 2), TRACE and META (default examples/demo.*).
set -euo pipefail
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CONNECTIONS=${CONNECTIONS:-8}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
TRACE=${TRACE:-$ROOT/examples/demo.pftrace}
META=${META:-$ROOT/examples/demo.meta.json}
KEY=e12d836b15bb49d7bbf99e64295d995b
for b in tracemill load_serve mock_kafka; do
  [ -x "$BUILD/$b" ] || { echo "bench_serve: $BUILD/$b is missing (build first)" >&2; exit 2; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tracemill-bench-serve.XXXXXX")
server_pid= mock_pid=
cleanup() {
  [ -n "$server_pid" ] && kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  [ -n "$mock_pid" ] && kill -TERM "$mock_pid" 2>/dev/null && wait "$mock_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
failed=0

# The host's speed now, as "median best" ms: the server's work on one
# envelope alone on one core (bench_process, 1 000 runs, ~0.3 s). This VM's
# cores do not keep one speed: on an idle machine the same loop's median
# moves between ~0.19 and ~0.31 ms within a minute, and the server's CPU per
# chunk moves with it, so each scenario is framed by two of these.
host_speed() {
  "$BUILD/bench_process" "$ROOT/examples/demo.envelope" 1000 2>/dev/null |
    sed -n 's/^tm_srv_process: best \([0-9.]*\) ms, median \([0-9.]*\) ms.*/\2 \1/p'
}

# run NAME CONFIG [BROKER_PID]: one server, one generator run; leaves the
# generator's "key: value" lines in $tmp/NAME.out and the host's speed
# before and after in $tmp/NAME.host.
run() {
  local name=$1 config=$2 port= i rc broker=()
  [ -n "${3:-}" ] && broker=(--broker-pid "$3")
  host_speed >"$tmp/$name.host"
  "$BUILD/tracemill" serve --config "$config" >"$tmp/$name.server.out" 2>"$tmp/$name.server.err" &
  server_pid=$!
  for i in $(seq 1 200); do
    port=$(sed -n 's|^tracemill serve: listening on http://[^ ]*:\([0-9]*\),.*|\1|p' "$tmp/$name.server.out")
    [ -n "$port" ] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.05
  done
  if [ -z "$port" ]; then
    echo "bench_serve: $name: the server did not start:" >&2
    cat "$tmp/$name.server.err" >&2
    server_pid=
    return 1
  fi
  echo "== $name: $(head -1 "$tmp/$name.server.out" | sed 's/^tracemill serve: //')"
  echo "   $CONNECTIONS connections, ${WARMUP} s warm-up, ${DURATION} s measured"
  rc=0
  "$BUILD/load_serve" --url "http://127.0.0.1:$port/api/1/envelope/" --key "$KEY" --trace "$TRACE" \
    --meta "$META" --connections "$CONNECTIONS" --duration "$DURATION" --warmup "$WARMUP" \
    --server-pid "$server_pid" "${broker[@]}" >"$tmp/$name.out" || rc=$?
  sed 's/^/   /' "$tmp/$name.out"
  # Where the time goes inside the server, from its own histograms.
  if command -v curl >/dev/null; then
    curl -fsS "http://127.0.0.1:$port/metrics" 2>/dev/null | awk '
      /^tracemill_conversion_seconds_(sum|count) / { c[$1] = $2 }
      /^tracemill_request_seconds_(sum|count) / { r[$1] = $2 }
      END {
        if (c["tracemill_conversion_seconds_count"] > 0 && r["tracemill_request_seconds_count"] > 0)
          printf "   server (whole run): mean conversion %.2f ms, mean request %.2f ms\n",
            1000 * c["tracemill_conversion_seconds_sum"] / c["tracemill_conversion_seconds_count"],
            1000 * r["tracemill_request_seconds_sum"] / r["tracemill_request_seconds_count"];
      }' || true
  fi
  kill -TERM "$server_pid"
  local src=0
  wait "$server_pid" || src=$?
  server_pid=
  host_speed >>"$tmp/$name.host"
  awk '{ m[NR] = $1; b[NR] = $2 }
    END { if (NR == 2) printf "   host speed (bench_process alone, ms an envelope): median %s before, %s after (best %s, %s)\n",
            m[1], m[2], b[1], b[2] }' "$tmp/$name.host"
  if [ "$src" -ne 0 ]; then
    echo "bench_serve: $name: the server exited with status $src after SIGTERM:" >&2
    cat "$tmp/$name.server.err" >&2
    failed=1
  fi
  if [ "$rc" -ne 0 ]; then
    echo "bench_serve: $name: load_serve failed (status $rc)" >&2
    failed=1
  fi
  if [ "$(sed -n 's/^errors: //p' "$tmp/$name.out")" != "0" ]; then
    echo "bench_serve: $name: the server answered errors (see above)" >&2
    failed=1
  fi
}

projects="projects:
  - id: 1
    public_keys: [$KEY]"

cat >"$tmp/store.yaml" <<EOF
listen: 127.0.0.1:0
store: {path: $tmp/store}
$projects
EOF
run store "$tmp/store.yaml" || failed=1
rm -rf "$tmp/store"

# The mock cluster runs until its stdin (a FIFO held open here) closes.
mkfifo "$tmp/mock.in"
"$BUILD/mock_kafka" <"$tmp/mock.in" >"$tmp/mock.out" 2>"$tmp/mock.err" &
mock_pid=$!
exec 7>"$tmp/mock.in"
bootstrap=
for i in $(seq 1 200); do
  bootstrap=$(head -1 "$tmp/mock.out")
  [ -n "$bootstrap" ] && break
  kill -0 "$mock_pid" 2>/dev/null || break
  sleep 0.05
done
if [ -z "$bootstrap" ]; then
  echo "bench_serve: mock_kafka did not start:" >&2
  cat "$tmp/mock.err" >&2
  exit 1
fi
cat >"$tmp/kafka.yaml" <<EOF
listen: 127.0.0.1:0
store: {path: $tmp/kafka-store}
$projects
kafka:
  bootstrap_servers: "$bootstrap"
EOF
run kafka "$tmp/kafka.yaml" "$mock_pid" || failed=1
exec 7>&-
wait "$mock_pid" || true
mock_pid=

echo "== summary ($(nproc) cores, $CONNECTIONS connections, ${DURATION} s)"
echo "(CPU: 100 % = one core; cpu_ms/chk = the server's utime + stime per accepted chunk; mock_cpu is the mock Kafka cluster, which shares the machine)"
printf '%-12s %9s %7s %7s %7s %7s %10s %9s %8s %8s  %s\n' scenario chunks/s MB/s p50_ms p99_ms max_ms server_cpu cpu_ms/chk mock_cpu gen_cpu target
for name in kafka store; do
  [ -s "$tmp/$name.out" ] || { printf '%-12s (no result)\n' "$name"; continue; }
  awk -v name="$name" -F': ' '
    { v[$1] = $2 }
    END {
      cps = v["chunks_per_s"]; p99 = v["p99_ms"];
      if (name == "kafka") {
        met = cps >= 2000 && p99 <= 50;
        t = sprintf(">= 2000 chunks/s (%.2fx) with p99 <= 50 ms (p99 at %.2fx of it): %s", cps / 2000, p99 / 50, met ? "met" : "missed");
      } else {
        met = cps >= 1000;
        t = sprintf(">= 1000 chunks/s (%.2fx): %s", cps / 1000, met ? "met" : "missed");
      }
      mock = ("broker_cpu_pct" in v) ? v["broker_cpu_pct"] "%" : "-";
      per_chunk = ("server_cpu_ms_per_chunk" in v) ? v["server_cpu_ms_per_chunk"] : "-";
      printf "%-12s %9.1f %7.1f %7.2f %7.2f %7.2f %9s%% %9s %8s %7s%%  %s\n", name == "kafka" ? "mock Kafka" : "local store",
        cps, v["mb_per_s"], v["p50_ms"], p99, v["max_ms"], v["server_cpu_pct"], per_chunk, mock, v["generator_cpu_pct"], t;
    }' "$tmp/$name.out"
done
echo "== server CPU per chunk against the 0.5 ms target (issue 17: 2000 chunks/s on 2 cores), by thread"
for name in kafka store; do
  [ -s "$tmp/$name.out" ] || continue
  awk -v name="$name" -F': ' '
    { v[$1] = $2 }
    END {
      if (!("server_cpu_ms_per_chunk" in v)) exit;
      c = v["server_cpu_ms_per_chunk"];
      printf "%-12s %6.3f ms = %.2fx the target: %s  (connections %s, store writer %s, librdkafka %s, other %s)\n",
        name == "kafka" ? "mock Kafka" : "local store", c, c / 0.5, c <= 0.5 ? "met" : "missed",
        v["server_cpu_ms_per_chunk_connections"], v["server_cpu_ms_per_chunk_store_writer"],
        v["server_cpu_ms_per_chunk_librdkafka"], v["server_cpu_ms_per_chunk_other"];
    }' "$tmp/$name.out"
  # the same run on a faster or slower host reads differently: say which it was
  [ -s "$tmp/$name.host" ] && awk '{ m[NR] = $1; b[NR] = $2 }
    END { if (NR == 2) printf "%12s host speed around it: bench_process median %s and %s ms (best %s and %s)\n",
            "", m[1], m[2], b[1], b[2] }' "$tmp/$name.host"
done
exit "$failed"
