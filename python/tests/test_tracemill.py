# test_tracemill.py — the Python API against the CLI and the C library's
# counters: every export byte for byte, info and threads, samples as tuples
# and numpy columns, SQL (tuples, DataFrame, errors), errors with their
# offsets, limits and Relay mode, memory over 1000 loads, the GIL released
# while decoding, and threads sharing one Trace.
import collections
import csv
import io
import json
import os
import pathlib
import re
import sys
import threading
import time

import pytest

import tracemill
from conftest import DEMO, FIXTURES, HOSTILE


@pytest.fixture(scope="module")
def demo():
    with tracemill.load(DEMO) as t:
        yield t


def error_offset(stderr):
    """The byte offset of the CLI's error line "... at byte N: ..."."""
    return int(re.search(rb"at byte (\d+)", stderr).group(1))


# ---- exports ----

@pytest.mark.parametrize("fmt,method", [("sample-v2", "to_sample_v2"), ("pprof", "to_pprof"), ("folded", "to_folded"),
                                        ("speedscope", "to_speedscope"), ("svg", "to_svg"), ("report", "report")])
def test_exports_equal_cli(cli, demo, fmt, method):
    out = getattr(demo, method)()
    data = out if isinstance(out, bytes) else out.encode("utf-8", "surrogateescape")
    expected = cli("convert", "-f", fmt, DEMO).stdout
    if fmt == "sample-v2":  # the CLI ends the JSON with a newline of its own (the report has one)
        assert expected.endswith(b"\n")
        expected = expected[:-1]
    assert data == expected


def test_export_options_equal_cli(cli, demo):
    assert demo.to_folded(thread="main", thread_prefix=True).encode() == \
        cli("convert", "-f", "folded", "--thread", "main", "--thread-prefix", DEMO).stdout
    assert demo.to_svg(title="T", reverse=True, width=800).encode() == \
        cli("convert", "-f", "svg", "--title", "T", "--reverse", "--width", "800", DEMO).stdout
    assert demo.to_pprof(thread=4201, uncompressed=True, period_ns=4000000) == \
        cli("convert", "-f", "pprof", "--thread", "4201", "--uncompressed", "--period", "4000000", DEMO).stdout
    meta = os.path.join(os.path.dirname(DEMO), "demo.meta.json")
    with open(meta) as f:
        meta_text = f.read()
    expected = cli("convert", "--meta", meta, DEMO).stdout
    assert demo.to_sample_v2(meta=meta_text).encode() + b"\n" == expected
    assert json.loads(demo.to_sample_v2(meta=json.loads(meta_text))) == json.loads(expected)


def test_svg_width_out_of_range_raises(demo):
    # checked as a Python int: never wrapped to 32 bits (-5 was 4294967291, 2**32 + 200 was 200)
    for width in (-5, 5, 99, 100001, 10**12, 2**32 + 200):
        with pytest.raises(ValueError, match="width"):
            demo.to_svg(width=width)
        with pytest.raises(ValueError, match="width"):
            tracemill.diff(demo, demo, "svg", width=width)
    assert 'width="100"' in demo.to_svg(width=100)


def test_diff_weighs_both_sides_by_one_value(cli, demo):
    heap = os.path.join(FIXTURES, "perfetto-difftests", "ProfilingHeapProfiling__heap_profile_dump_max",
                        "trace.pftrace")
    with pytest.raises(tracemill.InvalidArgumentError, match="weigh different values"):
        tracemill.diff(heap, demo, "folded")
    assert tracemill.diff(heap, heap, "folded", value="alloc_space").encode() == \
        cli("diff", "-f", "folded", "--value", "alloc_space", heap, heap).stdout


def test_relay_compat_matches_relay_fixture():
    fixture = os.path.join(FIXTURES, "relay-compat")
    with open(os.path.join(fixture, "meta.json"), "rb") as f:
        meta = f.read()
    with tracemill.load(os.path.join(fixture, "minimal.pftrace"), compat="relay") as t:
        assert t.info()["mode"] == "relay"
        ours = json.loads(t.to_sample_v2(meta=meta))
    with open(os.path.join(fixture, "expected", "minimal.expand.json")) as f:
        assert ours == json.load(f)


def test_write_infers_format(tmp_path, demo):
    for name, method in [("a.svg", demo.to_svg), ("a.folded", demo.to_folded), ("a.json", demo.to_sample_v2),
                         ("a.speedscope.json", demo.to_speedscope)]:
        demo.write(tmp_path / name)
        assert (tmp_path / name).read_text() == method()
    demo.write(tmp_path / "a.pb.gz")
    assert (tmp_path / "a.pb.gz").read_bytes() == demo.to_pprof()
    demo.write(tmp_path / "r", format="report")
    assert json.loads((tmp_path / "r").read_text())["samples"]["kept"] == 3000
    with pytest.raises(ValueError):
        demo.write(tmp_path / "a.unknown")


def test_diff_equals_cli(cli, tmp_path):
    base = os.path.join(FIXTURES, "relay-compat", "multi_sequence.pftrace")
    for fmt in ("folded", "svg"):
        assert tracemill.diff(base, DEMO, format=fmt).encode() == cli("diff", base, DEMO, "-f", fmt).stdout
    with tracemill.load(DEMO) as a, tracemill.load(DEMO) as b:
        lines = tracemill.diff(a, b, format="folded").splitlines()
        assert all(line.split()[-1] == line.split()[-2] for line in lines)
    with pytest.raises(ValueError):
        tracemill.diff(DEMO, DEMO, format="pprof")


def test_other_inputs_round_trip(demo):
    folded = demo.to_folded()
    with tracemill.load(folded.encode()) as t:
        assert t.to_folded() == folded
        assert sum(t.sample_columns()["weight"]) == 3000
    with tracemill.load(demo.to_sample_v2().encode()) as t:
        assert t.to_folded() == folded
        assert [s[1:] for s in t.samples()] == [s[1:] for s in demo.samples()]


# ---- info, threads, samples ----

def test_info_has_every_counter_of_the_header(demo):
    # Every field of tm_trace_stats in include/tracemill.h is a key of info(),
    # so that a counter added to the library is not missing from Python.
    header = open(os.path.join(os.path.dirname(FIXTURES), "..", "include", "tracemill.h")).read()
    body = re.search(r"typedef struct tm_trace_stats \{(.*?)\} tm_trace_stats;", header, re.S).group(1)
    fields = set(re.findall(r"^\s+(?:u?int(?:64|32)_t|int)\s+(\w+);", body, re.M)) - {"reserved_"}
    assert len(fields) > 60
    assert fields - set(demo.info()) == set()


def test_info_has_the_memory_profile(cli):
    trace = os.path.join(FIXTURES, "perfetto-difftests", "ProfilingHeapProfiling__heap_profile_dump_max",
                         "trace.pftrace")
    report = json.loads(cli("info", "--json", trace).stdout)
    with tracemill.load(trace) as t:
        info = t.info()
    assert info["heap_dumps"] > 0 and info["heap_inuse_bytes"] > 0
    memory = json.dumps(report)
    for key in ("heap_dumps", "heap_alloc_bytes", "heap_inuse_bytes"):
        assert str(info[key]) in memory, key


def test_max_input_bytes_stops_reading_a_file(tmp_path):
    # A limit stops the read past it, as the CLI's does (a pipe or device
    # that never ends would otherwise never return): of 64 MiB offered
    # through a FIFO, load reads a little and closes it.
    fifo = tmp_path / "long"
    os.mkfifo(fifo)
    written = [0]

    def feed():
        try:
            with open(fifo, "wb") as f:
                while written[0] < 64 << 20:
                    f.write(b"\n" * 65536)
                    written[0] += 65536
        except BrokenPipeError:
            pass
    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    with pytest.raises(tracemill.LimitError):
        tracemill.load(str(fifo), limits={"max_input_bytes": 1000})
    writer.join(timeout=30)
    assert written[0] < 64 << 20


def test_sources_of_every_documented_type_and_no_other():
    data = open(DEMO, "rb").read()
    for source in (DEMO, pathlib.Path(DEMO), data, bytearray(data), memoryview(data)):
        with tracemill.load(source) as t:
            assert len(t) == 3000
    # An int is no path: open() took it as a file descriptor, read it and
    # closed the caller's descriptor (tracemill.load(0): stdin).
    r, w = os.pipe()
    os.write(w, b"a;b 3\n")
    os.close(w)
    try:
        for source in (r, None, 1.5):
            with pytest.raises(TypeError, match="source must be a path"):
                tracemill.load(source)
        os.fstat(r)  # still open
    finally:
        os.close(r)


def test_every_input_format_loads_as_documented():
    # load's and Trace's docstrings name every format tm_input_detect knows
    # (Sample v1 was left out though it loads)
    v1 = os.path.join(FIXTURES, "sentry-python", "profile_v1.json")
    with tracemill.load(v1) as t:
        assert len(t) > 0 and "sample-v1" in t.report()
    for doc in (tracemill.load.__doc__, tracemill.Trace.__doc__):
        for name in ("Perfetto", "Sample v2", "Sample v1", "folded"):
            assert name in doc.replace("\n    ", " "), name


def test_max_input_bytes_message_gives_no_false_size():
    # Only 11 bytes of the demo's are read: "input is 11 bytes" was said of it.
    with pytest.raises(tracemill.LimitError) as e:
        tracemill.load(DEMO, limits={"max_input_bytes": 10})
    assert e.value.offset == 10 and "11 bytes" not in str(e.value) and "max_input_bytes (10)" in e.value.message
    data = open(DEMO, "rb").read()
    with pytest.raises(tracemill.LimitError) as e:  # bytes given whole: their size is known
        tracemill.load(data, limits={"max_input_bytes": 10})
    assert f"input is {len(data)} bytes" in e.value.message


def test_info_matches_report(cli, demo):
    info = demo.info()
    report = json.loads(cli("info", "--json", DEMO).stdout)
    assert info["bytes"] == report["bytes"] == os.path.getsize(DEMO)
    assert info["samples_kept"] == report["samples"]["kept"] == 3000
    assert info["perf_samples"] == report["samples"]["perf_sample"]
    assert info["streaming_samples"] == report["samples"]["streaming_profile"]
    assert info["packets"] == report["packets"]["read"]
    assert info["sequences"] == report["sequences"]["count"]
    assert info["incremental_resets"] == report["sequences"]["incremental_state_resets"]
    for key in ("threads", "frames", "stacks", "mappings", "mappings_without_build_id"):
        assert info[key] == report["profile"][key]
    assert (info["first_sample_ns"], info["last_sample_ns"]) == (report["first_sample_ns"], report["last_sample_ns"])
    assert info["has_realtime"] is True and info["truncated"] is False


def test_threads(cli, demo):
    threads = demo.threads()
    assert len(threads) == demo.info()["threads"]
    assert sum(t["samples"] for t in threads) == 3000
    assert threads[0] == {"tid": 4200, "pid": 4200, "name": "main", "samples": 750}
    chunk = json.loads(cli("convert", DEMO).stdout)
    names = {int(tid): m["name"] for tid, m in chunk["profile"]["thread_metadata"].items()}
    assert names == {t["tid"]: t["name"] for t in threads}


def folded_of(samples):
    counts = collections.Counter()
    for _, _, stack in samples:
        counts[";".join(f.replace(";", ":") for f in stack) or "[no frames]"] += 1
    return counts


def test_samples_agree_with_folded_and_sql(cli, demo):
    samples = list(demo.samples())
    assert len(samples) == len(demo) == 3000
    assert [s[0] for s in samples] == sorted(s[0] for s in samples)
    expected = collections.Counter()
    for line in cli("convert", "-f", "folded", DEMO).stdout.decode().splitlines():
        stack, count = line.rsplit(" ", 1)
        expected[stack] = int(count)
    assert folded_of(samples) == expected
    per_tid = collections.Counter(s[1] for s in samples)
    assert per_tid == {t["tid"]: t["samples"] for t in demo.threads()}
    perf = demo.query("select ts, tid from perf_sample join thread using (utid) order by ts, tid")
    assert len(perf) == 1500 and set(perf) <= {(s[0], s[1]) for s in samples}


def test_sample_columns(demo):
    np = pytest.importorskip("numpy")
    c = demo.samples(columns=True)
    samples = list(demo.samples())
    assert c["ts"].dtype == np.int64 and c["tid"].dtype == np.int64 and c["stack_id"].dtype == np.uint32
    assert c["ts"].tolist() == [s[0] for s in samples]
    assert c["tid"].tolist() == [s[1] for s in samples]
    stacks = demo.stacks()
    assert [stacks[i] for i in c["stack_id"]] == [s[2] for s in samples]
    assert len(stacks) == demo.info()["stacks"]
    assert c["weight"].sum() == 3000


def test_frames_in_app(cli, demo):
    """frames() says in_app per frame as the Sample v2 writer does, frame by frame."""
    frames = demo.frames()
    assert [f["name"] for f in frames if f["name"]]  # named frames
    assert {name for stack in demo.stacks() for name in stack} <= {f["name"] for f in frames}
    v2 = json.loads(cli("convert", "-f", "sample-v2", DEMO).stdout)
    written = v2["profile"]["frames"]
    assert len(written) == len(frames)
    assert [f.get("in_app") for f in written] == [f["in_app"] for f in frames]
    values = collections.Counter(f["in_app"] for f in frames)
    assert values[True] and values[False]  # the app's code, and libc/libart's
    app_java = [f for f in frames if f["name"].startswith("com.example.app.")]
    assert app_java and all(f["in_app"] is True for f in app_java)


# ---- SQL ----

def test_query_equals_cli_csv(cli, demo):
    sql = "select utid, tid, name from thread order by utid"
    rows = list(csv.reader(io.StringIO(cli("query", DEMO, sql, "--format", "csv").stdout.decode())))
    assert [tuple("" if v is None else str(v) for v in r) for r in demo.query(sql)] == [tuple(r) for r in rows[1:]]
    assert demo.query("select count(*) from perf_sample") == [(1500,)]
    assert demo.query("select 1; select 2, 'x', 1.5, null, x'00ff'") == [(2, "x", 1.5, None, b"\x00\xff")]


def test_query_errors(demo):
    with pytest.raises(tracemill.QueryError) as e:
        demo.query("select 1; select * from no_such_table")
    assert "no_such_table" in e.value.message and isinstance(e.value, tracemill.Error)
    assert e.value.offset == len("select 1; ")  # SQLite gives no offset: the statement's, as the CLI's
    with pytest.raises(tracemill.QueryError) as e:
        demo.query("select 1;\n  select abs(-9223372036854775807 - 1)")  # a run-time error
    assert e.value.offset == len("select 1;\n  ")
    with pytest.raises(tracemill.QueryError) as e:
        demo.query("select 1;\n-- overflows\n/* b */ select abs(-9223372036854775807 - 1)")  # not the comment's
    assert e.value.offset == len("select 1;\n-- overflows\n/* b */ ")
    with pytest.raises(tracemill.QueryError) as e:
        demo.query("select 1; selec 2")
    assert e.value.offset == len("select 1; ")
    with pytest.raises(tracemill.QueryError):
        demo.query("attach database '/tmp/x.db' as x")  # queries only read
    with pytest.raises(tracemill.UnsupportedError) as e:
        demo.query("select 1;\n include perfetto module no.such; select 2")  # offset 0 was the input's
    assert "no.such" in e.value.message and e.value.offset == len("select 1;\n include perfetto module ")
    with tracemill.load(demo.to_folded().encode()) as folded, pytest.raises(tracemill.UnsupportedError) as e:
        folded.query("select 1")  # SQL reads Perfetto input only
    assert "this is folded input" in e.value.message
    # the docstring says where offset points without one from SQLite (it said 0)
    assert "0 when unknown" not in tracemill.QueryError.__doc__ and "statement starts" in tracemill.QueryError.__doc__


def test_query_df(demo, monkeypatch):
    pd = pytest.importorskip("pandas")
    df = demo.query_df("select ts, cpu, utid from perf_sample order by ts")
    assert list(df.columns) == ["ts", "cpu", "utid"] and len(df) == 1500
    assert isinstance(df, pd.DataFrame) and df["ts"].is_monotonic_increasing
    assert str(df["ts"].dtype) == "int64"
    assert df["ts"].tolist() == [r[0] for r in demo.query("select ts from perf_sample order by ts")]
    mixed = demo.query_df("select 1 as a, 1.5 as a, 'x' as s, null as n union all select 2, 2, 'y', 3")
    assert list(mixed.columns) == ["a", "a", "s", "n"]
    assert mixed.iloc[:, 0].tolist() == [1, 2] and mixed.iloc[:, 1].tolist() == [1.5, 2.0]
    assert mixed["s"].tolist() == ["x", "y"] and mixed["n"].tolist()[1] == 3
    assert demo.query_df("select 1 as a, 'x' as b where 0").shape == (0, 2)
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match="needs pandas"):
        demo.query_df("select 1")


def test_sample_columns_without_numpy(demo, monkeypatch):
    monkeypatch.setitem(sys.modules, "numpy", None)
    with pytest.raises(ImportError, match="needs numpy"):
        demo.sample_columns()


# ---- errors and limits ----

@pytest.mark.parametrize("name,args,cls,status", [
    ("varint_11_bytes_timestamp.pftrace", {}, tracemill.MalformedError, "TM_ERR_MALFORMED"),
    ("truncated_inside_interned_data.pftrace", {}, tracemill.TruncatedError, "TM_ERR_TRUNCATED"),
    ("truncated_inside_perf_sample.pftrace", {"strict": True}, tracemill.TruncatedError, "TM_ERR_TRUNCATED"),
])
def test_malformed_raises_with_offset(cli, name, args, cls, status):
    path = os.path.join(HOSTILE, name)
    expected = error_offset(cli("convert", *(["--strict"] if args else []), path, check=False).stderr)
    with pytest.raises(cls) as e:
        tracemill.load(path, **args)
    assert e.value.status == status and e.value.offset == expected and e.value.offset > 0
    assert isinstance(e.value, tracemill.MalformedError) and e.value.message in str(e.value)


def test_limits(cli):
    expected = error_offset(cli("info", "--max-samples", "10", DEMO, check=False).stderr)
    with pytest.raises(tracemill.LimitError) as e:
        tracemill.load(DEMO, limits={"max_samples": 10})
    assert e.value.offset == expected and "max_samples" in e.value.message
    big = os.path.join(FIXTURES, "relay-compat", "exceeds_max_samples.pftrace")
    with tracemill.load(big) as t:
        assert t.info()["samples_kept"] > 100000
    with pytest.raises(tracemill.LimitError):
        tracemill.load(big, limits="relay")
    with pytest.raises(tracemill.LimitError) as e:
        tracemill.load(big, compat="relay")
    assert e.value.reason == "ExceedSizeLimit"
    with pytest.raises(ValueError):
        tracemill.load(DEMO, limits={"max_nothing": 1})
    with pytest.raises(ValueError):
        tracemill.load(DEMO, limits="tight")


def test_other_errors(demo):
    with pytest.raises(tracemill.EmptyError):
        tracemill.load(b"")
    with pytest.raises(tracemill.InvalidArgumentError, match="no thread named"):
        demo.to_folded(thread="nobody")
    with pytest.raises(tracemill.RejectedError) as e:
        demo.to_sample_v2(meta="{not json")
    assert e.value.reason == "InvalidJson"
    with pytest.raises(FileNotFoundError):
        tracemill.load("/nonexistent.pftrace")


def test_close():
    t = tracemill.load(DEMO)
    it = t.samples()
    next(it)
    with t:
        assert not t.closed
    assert t.closed
    t.close()
    for call in (t.info, t.to_folded, lambda: t.query("select 1"), lambda: next(it), lambda: len(t)):
        with pytest.raises(ValueError, match="closed"):
            call()


# ---- resources and threads ----

def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(os.environ.get("TRACEMILL_SANITIZED") == "1",
                    reason="AddressSanitizer's quarantine holds freed memory: RSS says nothing there")
def test_no_memory_growth_over_1000_loads():
    with open(DEMO, "rb") as f:
        data = f.read()

    def cycle(n):
        for i in range(n):
            with tracemill.load(data) as t:
                t.to_folded()
                if i % 10 == 0:
                    list(t.samples())
                    t.query("select count(*) from perf_sample")
            with pytest.raises(tracemill.LimitError):
                tracemill.load(data, limits={"max_samples": 10})
    cycle(100)  # warm up the allocators
    before = rss_bytes()
    cycle(1000)
    growth = rss_bytes() - before
    assert growth < 4 * 1024 * 1024, f"RSS grew by {growth} bytes over 1000 loads"


def test_concurrent_use_of_one_trace():
    t = tracemill.load(DEMO)  # the SQL database is built by whichever thread comes first
    sql = "select utid, count(*) from perf_sample group by utid order by utid"
    folded = t.to_folded()
    results, errors = [], []

    def work():
        try:
            for _ in range(10):
                results.append((t.query(sql), t.to_folded() == folded, len(list(t.samples()))))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=work) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert len(results) == 80
    assert all(r == (results[0][0], True, 3000) for r in results)
    assert sum(n for _, n in results[0][0]) == 1500
    t.close()


def test_decoding_releases_the_gil(demo):
    stacks = [line.rsplit(" ", 1)[0] for line in demo.to_folded().splitlines()]
    data = "".join(f"{stacks[i % len(stacks)]};leaf{i % 5000} {i % 7 + 1}\n" for i in range(80000)).encode()
    ticks = []
    worker = threading.Thread(target=lambda: tracemill.load(data).close())
    worker.start()
    while worker.is_alive():  # this thread keeps running while the other one decodes
        ticks.append(time.perf_counter())
        time.sleep(0)
    worker.join()
    duration = ticks[-1] - ticks[0] if len(ticks) > 1 else 0
    longest = max((b - a for a, b in zip(ticks, ticks[1:])), default=0)
    assert len(ticks) > 10 and longest < 0.6 * duration, (len(ticks), longest, duration)


def test_close_while_other_threads_work():
    t = tracemill.load(DEMO)
    svg = t.to_svg()
    done, start = [], threading.Barrier(5)

    def work():
        start.wait()
        ok = 0
        while True:
            try:
                assert t.to_svg() == svg
                ok += 1
            except ValueError:  # closed: the calls under way finished first
                break
        done.append(ok)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    start.wait()
    time.sleep(0.05)
    t.close()
    for th in threads:
        th.join()
    assert t.closed and len(done) == 4
