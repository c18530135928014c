"""cffi builder for the C core (out-of-line API mode).

The cdef is ``csrc/pyrope.h`` itself, run through the C preprocessor with
``ROPE_CDEF`` defined (no system headers; the storage-type list expands to
its enum), plus the header's numeric ``#define`` constants: the header is
the one description of the C API. Every ``csrc/*.c`` is compiled, so a new
kernel file needs no build list. ``setup.py`` names this module in
``cffi_modules``; ``python pyrope/_build.py`` builds the extension in place.
"""
import glob
import os
import re
import shlex
import subprocess
import sys
import sysconfig

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(os.path.dirname(HERE), "csrc")
SOURCES = sorted(os.path.relpath(p) for p in glob.glob(os.path.join(CSRC, "*.c")))

# C11, warnings on, no global -march: SIMD comes from function target
# attributes. -ffp-contract=off keeps the scalar kernel's roundings exactly as
# written, which is what makes it the specification of the SIMD kernels.
# PYROPE_CFLAGS / PYROPE_LDFLAGS add flags (the sanitizer build uses them).
CFLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-ffp-contract=off", "-fno-math-errno", "-pthread"]
CFLAGS += os.environ.get("PYROPE_CFLAGS", "").split()
LDFLAGS = (["-pthread"] if sys.platform != "win32" else []) + os.environ.get("PYROPE_LDFLAGS", "").split()

_INT_DEFINE = re.compile(r"^#define\s+(ROPE_\w+)\s+(-?\d+)\s*$", re.M)
_FLOAT_DEFINE = re.compile(r"^#define\s+(ROPE_\w+)\s+(-?(?:0x[0-9a-fA-F.]+p[-+]?\d+|\d+\.\d*(?:e[-+]?\d+)?))\s*$", re.M)


def _compiler():
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shlex.split(cc)[:1]


def cdef_from_header(path):
    """The header preprocessed as cffi wants it, plus its numeric constants."""
    with open(path, encoding="utf-8") as f:
        raw = f.read()
    expanded = subprocess.run(_compiler() + ["-E", "-P", "-DROPE_CDEF", "-x", "c", "-"], input=raw,
                              capture_output=True, text=True, check=True).stdout
    ints = [f"#define {name} {value}" for name, value in _INT_DEFINE.findall(raw)]
    floats = [f"static const double {name};" for name, _ in _FLOAT_DEFINE.findall(raw)]
    return "\n".join([expanded] + ints + floats)


ffibuilder = FFI()
ffibuilder.cdef(cdef_from_header(os.path.join(CSRC, "pyrope.h")))
ffibuilder.set_source(
    "pyrope._pyrope_cffi",
    '#include "pyrope.h"',
    sources=SOURCES,
    include_dirs=[os.path.relpath(CSRC)],
    extra_compile_args=CFLAGS,
    extra_link_args=LDFLAGS,
    libraries=["m"] if sys.platform != "win32" else [],
)

if __name__ == "__main__":
    ffibuilder.compile(tmpdir=os.path.dirname(HERE), verbose=False)
