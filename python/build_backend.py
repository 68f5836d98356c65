# build_backend.py — the package's PEP 517 build backend, in the tree and
# with no requirements, so that `pip install ./python` works offline: pip's
# isolated build environment then needs nothing from an index (setuptools
# would have to be downloaded into it). It builds the same extension as
# setup.py (the C module over the static libtracemill.a, made with CMake
# first when absent) with the C compiler Python was built with, and writes
# the wheel itself: the package files, the module, and the .dist-info
# (METADATA, WHEEL, RECORD with digests).
import base64
import hashlib
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("TRACEMILL_SOURCE_DIR", os.path.dirname(HERE))
BUILD = os.path.abspath(os.environ.get("TRACEMILL_BUILD_DIR", os.path.join(ROOT, "build")))
NAME, VERSION = "tracemill", "0.1.0"
PKG_DEPS = ["zlib", "jansson", "libdeflate", "sqlite3", "libzstd"]
PACKAGE_FILES = ["__init__.py", "_tracemill.pyi", "py.typed"]


def _pkg_config(flag):
    return subprocess.run(["pkg-config", flag, *PKG_DEPS], check=True, capture_output=True, text=True).stdout.split()


def _library():
    lib = os.path.join(BUILD, "libtracemill.a")
    if not os.path.exists(lib):
        if not os.path.exists(os.path.join(BUILD, "CMakeCache.txt")):
            subprocess.run(["cmake", "-S", ROOT, "-B", BUILD, "-DCMAKE_BUILD_TYPE=Release"], check=True)
        subprocess.run(["cmake", "--build", BUILD, "--target", "tracemill_static", "-j", os.environ.get("JOBS", "2")],
                       check=True)
    return lib


def _compile(out_dir):
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    module = os.path.join(out_dir, "_tracemill" + sysconfig.get_config_var("EXT_SUFFIX"))
    cmd = cc + ["-shared", "-fPIC", "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror",
                "-I" + sysconfig.get_paths()["include"], "-I" + os.path.join(ROOT, "include"),
                *_pkg_config("--cflags"), os.path.join(HERE, "src", "_tracemill.c"), _library(),
                *_pkg_config("--libs"), "-lm", "-Wl,--exclude-libs,ALL", "-o", module]
    subprocess.run(cmd, check=True)
    return module


def _tag():
    py = "cp%d%d" % sys.version_info[:2]
    return "%s-%s-%s" % (py, py, sysconfig.get_platform().replace("-", "_").replace(".", "_"))


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arcname, digest, len(data))


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    dist_info = "%s-%s.dist-info" % (NAME, VERSION)
    wheel_name = "%s-%s-%s.whl" % (NAME, VERSION, _tag())
    files = []
    for name in PACKAGE_FILES:
        with open(os.path.join(HERE, NAME, name), "rb") as f:
            files.append(("%s/%s" % (NAME, name), f.read()))
    with tempfile.TemporaryDirectory() as tmp:
        module = _compile(tmp)
        with open(module, "rb") as f:
            files.append(("%s/%s" % (NAME, os.path.basename(module)), f.read()))
    metadata = ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n"
                "Summary: Perfetto CPU profiles: decode, export, diff and query them with libtracemill\n"
                "Requires-Python: >=3.8\nProvides-Extra: numpy\nProvides-Extra: pandas\n") % (NAME, VERSION)
    files.append((dist_info + "/METADATA", metadata.encode()))
    files.append((dist_info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: tracemill build_backend\n"
                                         "Root-Is-Purelib: false\nTag: %s\n" % _tag()).encode()))
    files.append((dist_info + "/top_level.txt", (NAME + "\n").encode()))
    record = "\n".join(_record_line(n, d) for n, d in files) + "\n%s/RECORD,,\n" % dist_info
    files.append((dist_info + "/RECORD", record.encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w", zipfile.ZIP_DEFLATED) as whl:
        for arcname, data in files:
            whl.writestr(arcname, data)
    return wheel_name
