"""cffi builder for the C core (out-of-line API mode).

The cdef is ``csrc/pyrope.h`` itself, run through the C preprocessor with
``ROPE_CDEF`` defined (no system headers; the storage-type list expands to
its enum), plus the header's numeric ``#define`` constants: the header is
the one description of the C API. Every ``csrc/**/*.c`` is compiled (the
planes ``api/``, ``core/``, ``scalar/`` and ``isa/<name>/``, with ``csrc/``
the one include directory), so a new kernel file needs no build list.
``setup.py`` names this module in ``cffi_modules``; ``python
pyrope/_build.py`` builds the extension in place, under the file name
setup.py's build gives it (:func:`extension_filename`), and removes any
other build of it that Python would load first.

The same objects, compiled once (:func:`compile_objects`), also make
``libpyrope``, the shared library for C and C++ programs
(:func:`build_library`): ``lib/`` in the
package holds it and ``lib/pkgconfig/pyrope.pc``, ``include/`` holds
``pyrope.h``. ``setup.py`` builds it next to the extension, so wheels and
editable installs carry it, and so does the in-place build.

A machine without a C compiler, or without Python's C headers, stops the
build with one line naming what to install (:func:`missing_compiler`,
:func:`missing_python_headers`).
"""
import glob
import importlib.machinery
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from concurrent.futures import ThreadPoolExecutor

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(os.path.dirname(HERE), "csrc")
# every C file under csrc/, in every plane: the one source list of both builds
# (absolute for libpyrope, relative for cffi, whose object paths follow them)
SOURCE_PATHS = sorted(glob.glob(os.path.join(CSRC, "**", "*.c"), recursive=True))
SOURCES = [os.path.relpath(p) for p in SOURCE_PATHS]

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
    # what setuptools' build_ext runs too: CC, else the compiler Python was built with
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shlex.split(cc)[:1]


# Without these the build would end in a traceback (FileNotFoundError from the
# first compiler run, or a compile error deep in setuptools' output); instead it
# stops with one line saying what to install.
def missing_compiler():
    """The line to stop the build with when the C compiler it would run is not
    found (None when it is)."""
    cc = _compiler()
    if cc and shutil.which(cc[0]):
        return None
    named = f"CC={os.environ['CC']!r}" if os.environ.get("CC") else f"{(cc or ['cc'])[0]!r}, Python's own compiler,"
    return (f"pyrope needs a C compiler (C11: gcc or clang) to build its kernel, and {named} is not found: "
            f"install one (Debian/Ubuntu: apt-get install gcc; Fedora: dnf install gcc; macOS: xcode-select "
            f"--install) or set CC to one")


def missing_python_headers():
    """The line to stop the build with when Python's C headers, which the
    extension is compiled against, are not installed (None when they are)."""
    include = sysconfig.get_paths()["include"]
    if os.path.exists(os.path.join(include, "Python.h")):
        return None
    return (f"pyrope needs Python's C headers to build its extension, and {include} has no Python.h: "
            f"install them (Debian/Ubuntu: apt-get install python3-dev; Fedora: dnf install python3-devel)")


def require(problem):
    """Stop the build with ``problem`` (a line from the checks above), if any:
    SystemExit prints it alone, where pip shows the build's output."""
    if problem is not None:
        sys.exit(problem)


def cdef_from_header(path):
    """The header preprocessed as cffi wants it, plus its numeric constants."""
    with open(path, encoding="utf-8") as f:
        raw = f.read()
    expanded = subprocess.run(_compiler() + ["-E", "-P", "-DROPE_CDEF", "-x", "c", "-"], input=raw,
                              capture_output=True, text=True, check=True).stdout
    ints = [f"#define {name} {value}" for name, value in _INT_DEFINE.findall(raw)]
    floats = [f"static const double {name};" for name, _ in _FLOAT_DEFINE.findall(raw)]
    return "\n".join([expanded] + ints + floats)


MODULE = "pyrope._pyrope_cffi"

require(missing_compiler())   # the cdef below already runs it
CDEF = cdef_from_header(os.path.join(CSRC, "pyrope.h"))


def make_ffibuilder(objects=None):
    """The cffi builder of the extension: its module compiled from ``SOURCES``,
    or, given ``objects`` (:func:`compile_objects`), the module alone linked
    with them, the objects libpyrope is linked from too: the C core compiled
    once for both."""
    ffi = FFI()
    ffi.cdef(CDEF)
    ffi.set_source(
        MODULE,
        '#include "pyrope.h"',
        sources=[] if objects else SOURCES,
        extra_objects=list(objects or []),
        include_dirs=[os.path.relpath(CSRC)],
        extra_compile_args=CFLAGS,
        extra_link_args=LDFLAGS,
        libraries=["m"] if sys.platform != "win32" else [],
    )
    return ffi


# setup.py's (cffi_modules): complete as it stands; setup.py's build_ext
# swaps the sources for the shared objects (link_shared_objects)
ffibuilder = make_ffibuilder()


def extension_filename():
    """The extension's path relative to the source root, as setup.py's build
    names it: ``pyrope/_pyrope_cffi.abi3.so`` on CPython, where cffi builds for
    the stable ABI. cffi's own ``compile()`` would use the version-tagged name
    (``.cpython-311-x86_64-linux-gnu.so``), which Python prefers to ``.abi3.so``:
    an in-place build under it would shadow every later ``pip install -e .``."""
    from cffi.setuptools_ext import add_cffi_module
    from setuptools import Distribution

    # the Extension cffi_modules= makes (this file, by path, as setup.py names it)
    dist = Distribution()
    add_cffi_module(dist, f"{os.path.abspath(__file__)}:ffibuilder")
    build_ext = dist.get_command_obj("build_ext")
    build_ext.ensure_finalized()
    return build_ext.get_ext_filename(MODULE)


def remove_shadowing_builds(built):
    """Delete every other file ``import`` could load for the extension beside
    ``built`` (the file just written): builds under another suffix (an older
    in-place build, another Python's) would otherwise be loaded instead of it,
    or make which one loads depend on the suffix order. Returns their paths."""
    stem = os.path.join(os.path.dirname(built), MODULE.rsplit(".", 1)[1])
    removed = []
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = stem + suffix
        if os.path.exists(path) and not os.path.samefile(path, built):
            os.remove(path)
            removed.append(path)
    return removed


# ---- libpyrope: the C library shipped in the package ------------------------

HEADER = os.path.join(CSRC, "pyrope.h")
# where the package holds them, as numpy holds its own (include/, lib/pkgconfig/)
INCLUDE_DIR = "include"
LIB_DIR = "lib"
# only the declarations marked ROPE_API are exported; no global -march either
LIBRARY_CFLAGS = CFLAGS + ["-fPIC", "-fvisibility=hidden"]
# an ELF shared library with a soname: built and tested on Linux only; elsewhere
# the package is built without it
LIBRARY_PLATFORM = sys.platform.startswith("linux")


def header_version():
    """``(major, minor, patch, abi)`` as ``pyrope.h`` defines them."""
    with open(HEADER, encoding="utf-8") as f:
        defines = dict(_INT_DEFINE.findall(f.read()))
    return tuple(int(defines[f"ROPE_{name}"]) for name in
                 ("VERSION_MAJOR", "VERSION_MINOR", "VERSION_PATCH", "ABI_VERSION"))


def library_names():
    """``(soname, link name)``: ``libpyrope.so.<ABI>`` is the library, the name
    programs record and load; ``libpyrope.so`` the one ``-lpyrope`` finds."""
    return f"libpyrope.so.{header_version()[3]}", "libpyrope.so"


def library_outputs():
    """The files :func:`build_library` writes, relative to the package directory."""
    if not LIBRARY_PLATFORM:
        return []
    soname, link = library_names()
    return [os.path.join(INCLUDE_DIR, "pyrope.h"), os.path.join(LIB_DIR, soname), os.path.join(LIB_DIR, link),
            os.path.join(LIB_DIR, "pkgconfig", "pyrope.pc")]


def _pkg_config(version):
    # ${pcfiledir} is where pkg-config found this file: the package may be anywhere.
    # The rpath lets a program run without LD_LIBRARY_PATH: site-packages is no system
    # library directory.
    return "\n".join([
        "prefix=${pcfiledir}/../..",
        f"includedir=${{prefix}}/{INCLUDE_DIR}",
        f"libdir=${{prefix}}/{LIB_DIR}",
        "",
        "Name: pyrope",
        "Description: Rotary position embedding (RoPE) for the CPU: the C API of the pyrope package",
        f"Version: {version}",
        "Cflags: -I${includedir}",
        "Libs: -L${libdir} -Wl,-rpath,${libdir} -lpyrope",
        "",
    ])


def compile_objects(obj_dir):
    """Compile every ``csrc/**/*.c`` (:data:`SOURCE_PATHS`) into ``obj_dir``,
    in parallel, position-independent and with only ``ROPE_API`` symbols
    visible outside the shared object they end up in; returns the object
    paths, the inputs of both the extension and libpyrope."""
    os.makedirs(obj_dir, exist_ok=True)
    cc = _compiler()

    def compile_one(src):
        # named after the path under csrc/: two planes may hold files of one name
        obj = os.path.join(obj_dir, os.path.relpath(src, CSRC)[:-2].replace(os.sep, "_") + ".o")
        subprocess.run(cc + LIBRARY_CFLAGS + ["-I", CSRC, "-c", src, "-o", obj], check=True)
        return obj

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        return list(pool.map(compile_one, SOURCE_PATHS))


def link_shared_objects(ext, objects):
    """Make the setuptools Extension ``ext`` (setup.py's, from ``ffibuilder``)
    link ``objects`` instead of compiling the C core again: its sources are
    then cffi's module alone, and a newer object relinks it."""
    core = {os.path.normpath(s) for s in SOURCES}
    ext.sources = [s for s in ext.sources if os.path.normpath(s) not in core]
    ext.extra_objects = list(objects)
    ext.depends = list(ext.depends) + list(objects)


def build_library(package_dir, objects):
    """Link ``libpyrope`` from ``objects`` (:func:`compile_objects`) and put
    it, ``pyrope.h`` and ``pyrope.pc`` under ``package_dir``
    (:func:`library_outputs`). Returns the paths written (none but on Linux)."""
    if not LIBRARY_PLATFORM:
        return []
    major, minor, patch, _ = header_version()
    soname, link = library_names()
    lib_dir = os.path.join(package_dir, LIB_DIR)
    for d in (os.path.join(lib_dir, "pkgconfig"), os.path.join(package_dir, INCLUDE_DIR)):
        os.makedirs(d, exist_ok=True)
    # written under a temporary name and renamed: a failed build leaves the old library
    partial = os.path.join(lib_dir, f".{soname}.partial")
    subprocess.run(_compiler() + ["-shared", f"-Wl,-soname,{soname}", "-Wl,-z,defs", "-o", partial] + list(objects)
                   + LDFLAGS + ["-lm"], check=True)
    os.replace(partial, os.path.join(lib_dir, soname))
    # a copy, not a symlink: wheels (zip files) keep no links
    shutil.copyfile(os.path.join(lib_dir, soname), os.path.join(lib_dir, link))
    shutil.copyfile(HEADER, os.path.join(package_dir, INCLUDE_DIR, "pyrope.h"))
    with open(os.path.join(lib_dir, "pkgconfig", "pyrope.pc"), "w", encoding="utf-8") as f:
        f.write(_pkg_config(f"{major}.{minor}.{patch}"))
    return [os.path.join(package_dir, p) for p in library_outputs()]


if __name__ == "__main__":
    require(missing_python_headers())
    root = os.path.dirname(HERE)
    name = extension_filename()
    with tempfile.TemporaryDirectory() as tmp:
        objects = compile_objects(tmp)
        # cffi puts the target file name in the module's package directory
        built = make_ffibuilder(objects).compile(tmpdir=root, verbose=False, target=os.path.basename(name))
        expected = os.path.join(root, name)
        if not (os.path.exists(expected) and os.path.samefile(built, expected)):   # (a symlinked root is fine)
            sys.exit(f"cffi wrote the extension to {built}, not {expected}")
        remove_shadowing_builds(built)
        build_library(HERE, objects)
