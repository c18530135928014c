"""cffi builder for the C core (out-of-line API mode).

The cdef is the text of ``csrc/pyrope.h`` with preprocessor lines removed, so
the header is the one description of the C API. ``setup.py`` names this module
in ``cffi_modules``; ``python pyrope/_build.py`` builds the extension in place.
"""
import os
import re
import sys

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(os.path.dirname(HERE), "csrc")
SOURCES = ["api_rotate.c", "api_table.c", "dispatch.c", "rotate.c", "rotate_avx2.c", "table.c", "table_avx2.c",
           "table_exact.c", "table_f64.c", "threads.c", "yardstick.c"]

# C11, warnings on, no global -march: SIMD comes from function target
# attributes. -ffp-contract=off keeps the scalar kernel's roundings exactly as
# written, which is what makes it the specification of the SIMD kernels.
# PYROPE_CFLAGS / PYROPE_LDFLAGS add flags (the sanitizer build uses them).
CFLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-ffp-contract=off", "-fno-math-errno", "-pthread"]
CFLAGS += os.environ.get("PYROPE_CFLAGS", "").split()
LDFLAGS = (["-pthread"] if sys.platform != "win32" else []) + os.environ.get("PYROPE_LDFLAGS", "").split()


def _cdef_from_header(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    cdef = "\n".join(lines)
    # Integer #defines are constants the bindings need: keep them as cffi allows.
    defines = re.findall(r"^#define\s+(ROPE_\w+)\s+(-?\d+)\s*$", open(path).read(), flags=re.M)
    return cdef + "\n" + "\n".join(f"#define {name} {value}" for name, value in defines)


ffibuilder = FFI()
ffibuilder.cdef(_cdef_from_header(os.path.join(CSRC, "pyrope.h")))
ffibuilder.set_source(
    "pyrope._pyrope_cffi",
    '#include "pyrope.h"',
    sources=[os.path.relpath(os.path.join(CSRC, s)) for s in SOURCES],
    include_dirs=[os.path.relpath(CSRC)],
    extra_compile_args=CFLAGS,
    extra_link_args=LDFLAGS,
    libraries=["m"] if sys.platform != "win32" else [],
)

if __name__ == "__main__":
    ffibuilder.compile(tmpdir=os.path.dirname(HERE), verbose=False)
