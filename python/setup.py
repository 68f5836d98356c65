# setup.py — builds the tracemill Python package: the pure-Python layer in
# tracemill/ and the extension tracemill._tracemill (src/_tracemill.c)
# linked against the static libtracemill.a and its system libraries. The
# library comes from TRACEMILL_BUILD_DIR (default: the repository's build/),
# configured and built with CMake first when it is not there. Offline: no
# download, no build isolation needed (setuptools is the only requirement).
import os
import subprocess

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("TRACEMILL_SOURCE_DIR", os.path.dirname(HERE))
BUILD = os.path.abspath(os.environ.get("TRACEMILL_BUILD_DIR", os.path.join(ROOT, "build")))
LIB = os.path.join(BUILD, "libtracemill.a")
# What libtracemill links (CMakeLists.txt: tracemill_static), by pkg-config name.
PKG_DEPS = ["zlib", "jansson", "libdeflate", "sqlite3", "libzstd"]


def pkg_config(*args):
    return subprocess.run(["pkg-config", *args, *PKG_DEPS], check=True, capture_output=True,
                          text=True).stdout.split()


def ensure_library():
    if os.path.exists(LIB):
        return
    if not os.path.exists(os.path.join(BUILD, "CMakeCache.txt")):
        subprocess.run(["cmake", "-S", ROOT, "-B", BUILD, "-DCMAKE_BUILD_TYPE=Release"], check=True)
    subprocess.run(["cmake", "--build", BUILD, "--target", "tracemill_static", "-j", os.environ.get("JOBS", "2")],
                   check=True)


ensure_library()
extension = Extension(
    "tracemill._tracemill",
    sources=[os.path.relpath(os.path.join(HERE, "src", "_tracemill.c"), HERE)],
    include_dirs=[os.path.join(ROOT, "include")] + [f[2:] for f in pkg_config("--cflags-only-I")],
    extra_compile_args=["-std=c11", "-Wall", "-Wextra", "-Werror"],
    extra_objects=[LIB],
    libraries=[f[2:] for f in pkg_config("--libs-only-l")] + ["m"],
    library_dirs=[f[2:] for f in pkg_config("--libs-only-L")],
    # The library's tm_* symbols stay inside the module.
    extra_link_args=["-Wl,--exclude-libs,ALL"],
    depends=[LIB, os.path.join(ROOT, "include", "tracemill.h")],
)

setup(
    name="tracemill",
    version="0.1.0",
    description="Perfetto CPU profiles: decode, export, diff and query them with libtracemill",
    python_requires=">=3.8",
    packages=["tracemill"],
    package_data={"tracemill": ["py.typed", "*.pyi"]},
    ext_modules=[extension],
    extras_require={"numpy": ["numpy"], "pandas": ["pandas"]},
)
