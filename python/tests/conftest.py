# conftest.py — shared fixtures of the Python tests: the repository's paths,
# the tracemill CLI to compare against (TRACEMILL_CLI, default build/tracemill)
# and a helper that runs it.
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "examples", "demo.pftrace")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
HOSTILE = os.path.join(ROOT, "tests", "hostile")


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("TRACEMILL_CLI", os.path.join(ROOT, "build", "tracemill"))
    if not os.access(path, os.X_OK):
        pytest.skip(f"no tracemill CLI at {path}")

    def run(*args, check=True):
        r = subprocess.run([path, *args], capture_output=True)
        if check and r.returncode != 0:
            raise AssertionError(f"tracemill {' '.join(args)}: {r.stderr.decode()}")
        return r
    return run
