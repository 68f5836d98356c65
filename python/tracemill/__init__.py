# tracemill/__init__.py — the Python API of tracemill: load() and Trace
# (exports, samples as tuples or numpy columns, SQL as tuples or a pandas
# DataFrame, write), diff(), and the error classes. The decoding, the
# writers and SQL run in the C extension tracemill._tracemill.
"""Perfetto CPU profiles from Python, through libtracemill (in-process, no CLI).

    import tracemill
    with tracemill.load("examples/demo.pftrace") as t:
        print(t.info()["samples_kept"], t.threads())
        folded = t.to_folded()
        rows = t.query("select count(*) from perf_sample")
"""
from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, Union

from . import _tracemill
from ._tracemill import (EmptyError, Error, InvalidArgumentError, LimitError, MalformedError, OutOfMemoryError,
                         QueryError, RejectedError, TraceIOError, TruncatedError, UnsupportedError)

__version__ = _tracemill.__version__
__all__ = ["load", "diff", "Trace", "Error", "OutOfMemoryError", "MalformedError", "TruncatedError", "LimitError",
           "UnsupportedError", "TraceIOError", "InvalidArgumentError", "RejectedError", "EmptyError", "QueryError"]

Source = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]
Thread = Union[int, str, None]

# Formats of Trace.write, and the names that imply one.
_FORMATS = ("sample-v2", "pprof", "folded", "speedscope", "svg", "report")
_BY_SUFFIX = [(".pb.gz", "pprof"), (".pb", "pprof"), (".folded", "folded"), (".txt", "folded"),
              (".speedscope.json", "speedscope"), (".svg", "svg"), (".json", "sample-v2")]


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _read(source: Source, max_bytes: int = 0) -> bytes:
    """The bytes of source; from a file at most max_bytes + 1 (when not 0):
    one past the limit is enough for the library to refuse it, and a huge
    file, a pipe or a device is not read to its end first."""
    if isinstance(source, bytes):
        return source
    if isinstance(source, (bytearray, memoryview)):
        return bytes(source)
    if not isinstance(source, (str, os.PathLike)):  # open() would take an int as a descriptor, and close it
        raise TypeError(f"source must be a path (str or os.PathLike) or the bytes of a profile (bytes, bytearray, "
                        f"memoryview), not {type(source).__name__}")
    with open(source, "rb") as f:
        return f.read(max_bytes + 1) if max_bytes > 0 else f.read()


class Trace(_tracemill.Trace):
    """A decoded profile: a Perfetto trace, Sample v2 chunk, Sample v1 profile or folded stacks.

    Made by tracemill.load(). Immutable, usable from several threads at once,
    and a context manager: close() (or leaving the with block) frees it.
    Frame names are those of the text formats: the function (Java:
    Class.method), else "0xADDR (library)".
    """

    def samples(self, columns: bool = False) -> Any:
        """The samples in time order, as an iterator of (ts, tid, stack) tuples:
        ts in trace-clock nanoseconds, stack a tuple of frame names root first.
        With columns=True: sample_columns()."""
        if columns:
            return self.sample_columns()
        return self._iter_samples()

    def sample_columns(self) -> Dict[str, Any]:
        """The samples as numpy arrays: ts (int64, ns), tid (int64), stack_id
        (uint32, an index into stacks()) and weight (uint64: 1 per sample;
        folded input: the line's count). Needs numpy."""
        try:
            import numpy
        except ImportError as e:
            raise ImportError("Trace.sample_columns() needs numpy (apt-get install python3-numpy, "
                              "or pip install numpy)") from e
        ts, tid, stack, weight = self._sample_buffers()
        return {"ts": numpy.frombuffer(ts, dtype=numpy.int64), "tid": numpy.frombuffer(tid, dtype=numpy.int64),
                "stack_id": numpy.frombuffer(stack, dtype=numpy.uint32),
                "weight": numpy.frombuffer(weight, dtype=numpy.uint64)}

    def query(self, sql: str) -> List[Tuple[Any, ...]]:
        """Runs SQL over Trace Processor's tables (perf_sample, thread,
        stack_profile_frame, ...; several statements allowed) and returns the
        rows of the last statement that has columns. The tables are built from
        the input on the first query (Perfetto input only) and kept."""
        return self._query(sql)[1]

    def query_df(self, sql: str) -> Any:
        """query() as a pandas.DataFrame with the statement's column names.
        Needs pandas."""
        try:
            import pandas
        except ImportError as e:
            raise ImportError("Trace.query_df() needs pandas (apt-get install python3-pandas, "
                              "or pip install pandas); Trace.query() returns plain tuples") from e
        import numpy
        names, columns, kinds = self._query(sql, by_column=True)
        # Integer columns arrive as int64 arrays, numbers become float64
        # arrays; pandas infers the others.
        data = {i: numpy.frombuffer(c, dtype=numpy.int64) if k == "i" else numpy.array(c, dtype=numpy.float64)
                if k == "f" else c for i, (c, k) in enumerate(zip(columns, kinds))}
        frame = pandas.DataFrame(data, columns=range(len(names)))
        frame.columns = names  # names may repeat: set after building
        return frame

    def to_sample_v2(self, meta: Union[None, str, bytes, Mapping[str, Any]] = None,
                     remove_single_samples: bool = False) -> str:
        """One Sentry Sample v2 profile chunk (JSON). meta: the chunk metadata
        (a JSON text or a dict) to merge, as Relay does."""
        if isinstance(meta, Mapping):
            import json
            meta = json.dumps(meta)
        if isinstance(meta, str):
            meta = meta.encode()
        return _text(self._export("sample-v2", meta=meta, remove_single_samples=remove_single_samples))

    def to_pprof(self, thread: Thread = None, period_ns: int = 0, uncompressed: bool = False,
                 value: Optional[str] = None) -> bytes:
        """A pprof profile, gzip-compressed unless uncompressed. thread: a tid
        or a thread name to keep only that thread; period_ns 0: inferred.
        value: a memory value (alloc_objects, alloc_space, inuse_objects,
        inuse_space) writes the memory profile with that default type;
        off_cpu or wall the off-CPU (record --off-cpu) or wall-clock time in
        ns; None: CPU samples, or inuse_space for a trace with only a memory
        profile."""
        return self._export("pprof", thread=thread, period_ns=period_ns, uncompressed=uncompressed, value=value)

    def to_folded(self, thread: Thread = None, thread_prefix: bool = False, value: Optional[str] = None) -> str:
        """Folded stacks: "root;...;leaf COUNT" lines, sorted. value: what a
        memory profile counts (as for to_pprof)."""
        return _text(self._export("folded", thread=thread, thread_prefix=thread_prefix, value=value))

    def to_speedscope(self, thread: Thread = None, period_ns: int = 0, name: Optional[str] = None,
                      value: Optional[str] = None) -> str:
        """A speedscope JSON file, one sampled profile per thread."""
        return _text(self._export("speedscope", thread=thread, period_ns=period_ns, name=name, value=value))

    def to_svg(self, thread: Thread = None, title: Optional[str] = None, reverse: bool = False,
               width: int = 0, value: Optional[str] = None) -> str:
        """A self-contained interactive flame graph SVG (reverse: icicle)."""
        return _text(self._export("svg", thread=thread, title=title, reverse=reverse, width=width, value=value))

    def report(self) -> str:
        """The data-quality report: one JSON object (as `tracemill info --json`)."""
        return _text(self._export("report"))

    def write(self, path: Union[str, "os.PathLike[str]"], format: Optional[str] = None, **options: Any) -> None:
        """Writes the trace to path in format (sample-v2, pprof, folded,
        speedscope, svg, report); without one, it follows the name: .pb.gz
        and .pb pprof, .folded and .txt folded, .speedscope.json speedscope,
        .svg svg, .json sample-v2. options go to the matching to_* method."""
        if format is None:
            name = os.fspath(path)
            format = next((f for suffix, f in _BY_SUFFIX if name.endswith(suffix)), None)
            if format is None:
                raise ValueError(f"no format given and none follows from the name {name!r}")
        if format not in _FORMATS:
            raise ValueError(f"unknown format {format!r} (one of {', '.join(_FORMATS)})")
        method = {"sample-v2": self.to_sample_v2, "pprof": self.to_pprof, "folded": self.to_folded,
                  "speedscope": self.to_speedscope, "svg": self.to_svg, "report": self.report}[format]
        out = method(**options)
        data = out.encode("utf-8", "surrogateescape") if isinstance(out, str) else out
        with open(path, "wb") as f:
            f.write(data)

    def __iter__(self) -> Iterator[Tuple[int, int, Tuple[str, ...]]]:
        return self._iter_samples()

    def __repr__(self) -> str:
        if self.closed:
            return "<tracemill.Trace closed>"
        return f"<tracemill.Trace {len(self)} samples, {len(self.threads())} threads>"


def _options(limits: Union[None, str, Mapping[str, int]], compat: Optional[str]) -> Dict[str, Any]:
    if compat not in (None, "relay"):
        raise ValueError(f"compat must be None or 'relay', not {compat!r}")
    kw: Dict[str, Any] = {"mode": 1 if compat == "relay" else 0}
    if limits is None or limits == "generous":
        kw["preset"] = 0
    elif limits == "relay":
        kw["preset"] = 1
    elif isinstance(limits, Mapping):
        kw["limits"] = dict(limits)
    else:
        raise ValueError(f"limits must be None, 'generous', 'relay' or a dict of limits, not {limits!r}")
    return kw


def load(source: Source, limits: Union[None, str, Mapping[str, int]] = None, compat: Optional[str] = None,
         strict: bool = False) -> Trace:
    """Decodes a profile from a path or from bytes: a Perfetto trace (also gzip
    or zstd compressed whole), a Sample v2 chunk, a Sample v1 (transaction)
    profile or folded stacks, detected from the first bytes. The GIL is
    released while it decodes.

    limits: None or "generous" (the CLI's), "relay" (Relay's hardened limits),
    or a dict of tm_limits fields (max_samples, max_stack_depth, ...) that
    override the preset; max_input_bytes also stops reading a file past it. compat="relay": byte-compatible with Sentry Relay's
    converter (Perfetto input only; implies Relay's limits). strict: reject a
    trace cut off inside a packet. Raises a tracemill.Error subclass, whose
    offset is the byte of the input where the problem was found."""
    options = _options(limits, compat)
    max_bytes = options.get("limits", {}).get("max_input_bytes", 0)
    max_bytes = max_bytes if isinstance(max_bytes, int) else 0
    data = _read(source, max_bytes)
    try:
        return Trace(data, strict=strict, **options)
    except LimitError as e:
        # A file is read only to one byte past the limit: its size is not
        # that of the bytes read, so do not give it as such.
        if max_bytes > 0 and data is not source and len(data) == max_bytes + 1 and e.offset == max_bytes:
            e.message = f"input is larger than max_input_bytes ({max_bytes})"
            e.args = (e.message,)
        raise


def diff(base: Union[Trace, Source], new: Union[Trace, Source], format: str = "svg", thread: Thread = None,
         title: Optional[str] = None, reverse: bool = False, width: int = 0, thread_prefix: bool = False,
         value: Optional[str] = None) -> str:
    """A differential flame graph of new against base (format "svg"), or one
    "stack BASE NEW" line per stack of either (format "folded"). base and new
    are Traces, paths or bytes. value: what both are weighed by ("samples",
    "inuse_space", ...; None: each side's default, which must agree)."""
    loaded = []
    try:
        for source in (base, new):
            loaded.append(source if isinstance(source, Trace) else load(source))
        return _text(_tracemill.diff(loaded[0], loaded[1], format, thread=thread, title=title, reverse=reverse,
                                     width=width, thread_prefix=thread_prefix, value=value))
    finally:
        for t, source in zip(loaded, (base, new)):
            if t is not source:
                t.close()
