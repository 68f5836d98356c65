# test_wheel.py — the in-tree build backend (python/build_backend.py), which
# `pip install ./python` uses offline: its wheel holds the package, the
# module and a RECORD whose digests match, and, unpacked, it imports and
# reads the demo trace in a fresh interpreter.
import base64
import hashlib
import os
import subprocess
import sys
import zipfile

import pytest

from conftest import DEMO, ROOT

sys.path.insert(0, os.path.join(ROOT, "python"))
import build_backend  # noqa: E402


@pytest.mark.skipif(os.environ.get("TRACEMILL_SANITIZED") == "1",
                    reason="the wheel is built unsanitized, against the build's sanitized library")
def test_wheel_builds_installs_and_reads_the_demo(tmp_path, monkeypatch):
    assert build_backend.get_requires_for_build_wheel() == []
    monkeypatch.setenv("TRACEMILL_BUILD_DIR", os.environ.get("TRACEMILL_BUILD_DIR", os.path.join(ROOT, "build")))
    name = build_backend.build_wheel(str(tmp_path))
    assert name.startswith("tracemill-0.1.0-cp%d%d-" % sys.version_info[:2]) and name.endswith(".whl")
    with zipfile.ZipFile(tmp_path / name) as whl:
        names = whl.namelist()
        assert "tracemill/__init__.py" in names and "tracemill/py.typed" in names
        assert any(n.startswith("tracemill/_tracemill") and n.endswith(".so") for n in names)
        record = whl.read("tracemill-0.1.0.dist-info/RECORD").decode().splitlines()
        for line in record:
            path, digest, size = line.rsplit(",", 2)
            if not digest:
                continue
            data = whl.read(path)
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == "sha256=" + want and int(size) == len(data), path
        whl.extractall(tmp_path / "site")
    code = "import tracemill; print(tracemill.load(%r).info()['samples_kept'])" % DEMO
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
                         capture_output=True, text=True, check=True).stdout
    import tracemill
    assert int(out) == tracemill.load(DEMO).info()["samples_kept"] > 0
