"""Build the native core: Cython modules in pybroker/_native over plain C in csrc/.

Every ``pybroker/_native/*.pyx`` is one extension module. A module names the C files it
needs in its own header (``# distutils: sources = csrc/pb_x.c``), so adding a domain never
touches this file. liburing is reached through cffi (``_uring_build.py``).

Environment switches (STYLE 14):
  PYBROKER_DEBUG=1     -O0, Cython line tracing, PB_DEBUG=1 internal checks
  PYBROKER_SANITIZE=1  AddressSanitizer + UBSan (run Python with LD_PRELOAD=libasan.so)
  PYBROKER_COVERAGE=1  gcov instrumentation of the C code
  PYBROKER_BUILD_ONLY=records,index  build just these modules (quick edit-compile loops)
Release builds keep frame pointers and symbols so ``perf record -g`` sees native stacks.
"""

import glob
import os

from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0", "false", "no")


DEBUG = _flag("PYBROKER_DEBUG")
SANITIZE = _flag("PYBROKER_SANITIZE")
COVERAGE = _flag("PYBROKER_COVERAGE")

compile_args = ["-g", "-fno-omit-frame-pointer", "-Wall", "-Wsign-compare", "-std=gnu11"]
link_args = ["-g"]
macros = []
directives = {"language_level": 3, "boundscheck": False, "wraparound": False,
              "cdivision": True, "embedsignature": True}

if DEBUG:
    compile_args += ["-O0"]
    macros += [("PB_DEBUG", "1"), ("CYTHON_TRACE_NOGIL", "1")]
    directives.update(linetrace=True, boundscheck=True)
else:
    compile_args += ["-O2"]
if SANITIZE:
    san = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]
    compile_args += san
    link_args += san
if COVERAGE:
    compile_args += ["--coverage"]
    link_args += ["--coverage"]


def native_extensions():
    only = {m for m in os.environ.get("PYBROKER_BUILD_ONLY", "").split(",") if m}
    extensions = []
    for pyx in sorted(glob.glob(os.path.join("pybroker", "_native", "*.pyx"))):
        module = os.path.splitext(os.path.basename(pyx))[0]
        if only and module not in only:
            continue
        name = "pybroker._native." + module
        extensions.append(Extension(
            name, [pyx],
            include_dirs=["csrc"],
            define_macros=macros,
            extra_compile_args=compile_args,
            extra_link_args=link_args,
        ))
    return cythonize(extensions, compiler_directives=directives,
                     include_path=["pybroker/_native"], nthreads=0)


cffi_modules = []
if (not os.environ.get("PYBROKER_BUILD_ONLY") or "_uring" in os.environ["PYBROKER_BUILD_ONLY"]) \
        and os.path.exists(os.path.join(HERE, "pybroker", "_native", "_uring_build.py")):
    cffi_modules.append("pybroker/_native/_uring_build.py:ffibuilder")

setup(ext_modules=native_extensions(), cffi_modules=cffi_modules)
