"""The two recipes of docs/ARCHITECTURE.md ("Recipes"), applied: `make check-recipes`.

On a scratch copy of the tree (build/recipes/tree, never the checkout) it
applies, as the recipes say,
  (a) "Add an instruction set": a toy entry, "toy", that keeps the scalar
      kernels and is always supported: csrc/isa/toy/isa_toy.c and its row
      (with its extern line) in csrc/core/dispatch.c's REGISTRY, last, so it
      is the entry chosen by default;
  (b) "Add a storage type": a 1-byte one, int8 (numpy's int8: float32
      arithmetic, rounded to nearest even and saturated on store, NaN stored
      as 0): its entry at the end of ROPE_STORAGE_TYPES in csrc/pyrope.h and
      its rope_ld_i8/rope_st_i8 in csrc/scalar/pair.h;
then, with nothing else changed, builds the C core under ASan + UBSan (once,
warning-free, the objects both programs link) and runs tests/c/kernels_identical.c (every supported entry, every storage type
of the list) and, on the extension built the same way, the Python kernel
tests over every ISA x storage type of the registries (RECIPE_TESTS). It
first checks that each recipe's steps in the docs name exactly the files it
changes here, so the docs and this script cannot drift apart.

    python tests/support/recipes.py        (from the checkout's root; CC, PYTHON as make has them)
"""
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRATCH = os.path.join(ROOT, "build", "recipes")
TREE = os.path.join(SCRATCH, "tree")
DOCS = os.path.join(ROOT, "docs", "ARCHITECTURE.md")
CC = os.environ.get("CC", "cc")
SAN = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g", "-O1"]
KERNEL_CFLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off", "-fno-math-errno", "-pthread"]
# every ISA (the isa fixture: pyrope.supported_isas()) against the reference
# through the Python API, in every storage type (pyrope._engine.dtypes.storage_dtypes(),
# from the C list): the cases the recipes add (the toy entry with every type, every
# entry with int8); `make sanitize` runs the rest. The tails and guards of the same
# cases are kernels_identical's (every kernel of every entry and type, under ASan,
# bit for bit against the scalar one), so tests/kernel/test_tails_guard.py, which
# checks them again through Python at several times the cost, is not run here.
RECIPE_TESTS = ["tests/kernel/test_kernel_vs_reference.py", "-k", "toy or int8"]

# ---- (a) an instruction set ----------------------------------------------------

ISA_FILE = "csrc/isa/toy/isa_toy.c"
ISA_SOURCE = """\
/* A toy instruction set (the recipe's check): always supported, it keeps
 * every scalar kernel (no override). */
#include "core/kernels.h"

static int toy_supported(void) { return 1; }

const rope_isa rope_isa_toy = {"toy", toy_supported, NULL, ""};
"""
REGISTRY_FILE = "csrc/core/dispatch.c"
EXTERN_LINE = "extern const rope_isa rope_isa_toy;          /* isa/toy/ */\n"
REGISTRY_ROW = "    {&rope_isa_toy, NULL},\n"

# ---- (b) a storage type ----------------------------------------------------------

LIST_FILE = "csrc/pyrope.h"
LIST_ENTRY = 'X(ROPE_I8, i8, int8_t, float, "int8")'
PAIR_FILE = "csrc/scalar/pair.h"
PAIR_LINES = """\
static inline float rope_ld_i8(const int8_t *p) { return *p; }
static inline void rope_st_i8(int8_t *p, float v)
{
    *p = (int8_t)(v != v ? 0 : v >= 127.0f ? 127 : v <= -128.0f ? -128 : (int)rintf(v));
}
"""

RECIPES = {  # the docs' heading -> the files its steps name, as this script changes them
    "### Add an instruction set": {"csrc/isa/<name>/isa_<name>.c": ISA_FILE, REGISTRY_FILE: REGISTRY_FILE},
    "### Add a storage type": {LIST_FILE: LIST_FILE, PAIR_FILE: PAIR_FILE},
}


def fail(why):
    sys.exit(f"check-recipes: {why}")


def docs_name_the_files():
    """Each recipe's numbered steps name (in backticks) exactly the files it changes here."""
    text = open(DOCS, encoding="utf-8").read()
    for heading, files in RECIPES.items():
        start = text.find(heading)
        if start < 0:
            fail(f"docs/ARCHITECTURE.md has no recipe {heading!r}")
        body = text[start + len(heading):]
        body = body[:body.find("\n#")]
        steps = "\n".join(re.findall(r"^\d+\. .*(?:\n(?!\d+\. |\n).*)*", body, re.M))
        named = set(re.findall(r"`(csrc/[^`\s]+)`", steps))
        if named != set(files):
            fail(f"{heading!r} in the docs names {sorted(named)}; this script changes {sorted(files)}")


def edit(path, old, new):
    path = os.path.join(TREE, path)
    text = open(path, encoding="utf-8").read()
    if text.count(old) != 1:
        fail(f"{path}: expected one {old!r}")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace(old, new))


def copy_tree():
    shutil.rmtree(SCRATCH, ignore_errors=True)
    os.makedirs(TREE)
    for name in ("csrc", "pyrope", "tests", "docs"):
        shutil.copytree(os.path.join(ROOT, name), os.path.join(TREE, name), ignore=shutil.ignore_patterns(
            "_pyrope_cffi*", "lib", "include", "__pycache__", "*.o"))
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy(os.path.join(ROOT, name), TREE)


def apply_recipes():
    # (a) one new file in its own folder, one registry row (and its extern line)
    os.makedirs(os.path.join(TREE, os.path.dirname(ISA_FILE)))
    with open(os.path.join(TREE, ISA_FILE), "w", encoding="utf-8") as f:
        f.write(ISA_SOURCE)
    dispatch = open(os.path.join(TREE, REGISTRY_FILE), encoding="utf-8").read()
    last_extern = re.findall(r"^extern const rope_isa rope_isa_\w+;.*\n", dispatch, re.M)[-1]
    edit(REGISTRY_FILE, last_extern, last_extern + EXTERN_LINE)
    registry = re.search(r"\} REGISTRY\[\] = \{\n(?:    \{.*\},\n)+", dispatch).group(0)
    edit(REGISTRY_FILE, registry, registry + REGISTRY_ROW)
    # (b) one entry at the end of the list, its load and store beside the others
    header = open(os.path.join(TREE, LIST_FILE), encoding="utf-8").read()
    last = re.search(r"#define ROPE_STORAGE_TYPES\(X\)(?:.*\\\n)*(    X\(.*\))\n", header).group(1)
    edit(LIST_FILE, last + "\n", f"{last} \\\n    {LIST_ENTRY}\n")
    stores = re.findall(r"^static inline void rope_st_\w+\(.*\n", open(os.path.join(TREE, PAIR_FILE)).read(), re.M)
    edit(PAIR_FILE, stores[-1], stores[-1] + PAIR_LINES)


def run(cmd, quiet=False, **kw):
    print("+", " ".join(cmd), flush=True)
    done = subprocess.run(cmd, cwd=TREE, capture_output=quiet, text=True, **kw)
    if done.returncode:
        fail(f"exit status {done.returncode}" + (f":\n{done.stdout}{done.stderr}" if quiet else ""))


def main():
    docs_name_the_files()
    copy_tree()
    apply_recipes()
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allocator_may_return_null=1",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    # the C core with both recipes, under ASan + UBSan, compiled once (in parallel,
    # warning-free: -Werror) into the objects that the extension (libpyrope is not
    # needed here) and kernels_identical both link; the extension linked while the
    # C check below runs
    san_env = dict(os.environ, PYROPE_CFLAGS=" ".join(SAN + ["-Werror"]),
                   PYROPE_LDFLAGS="-fsanitize=address,undefined")
    obj_dir = os.path.join(SCRATCH, "objects")
    objects = ("import sys; sys.path.insert(0, 'pyrope'); import _build; "
               f"print('\\n'.join(_build.compile_objects({obj_dir!r})))")
    print("+", sys.executable, "-c", objects, flush=True)
    done = subprocess.run([sys.executable, "-c", objects], cwd=TREE, capture_output=True, text=True, env=san_env)
    if done.returncode:
        fail(f"compiling the C core: exit status {done.returncode}:\n{done.stdout}{done.stderr}")
    objs = done.stdout.split()
    build = ("import os, sys; sys.path.insert(0, 'pyrope'); import _build; "
             f"_build.make_ffibuilder({objs!r}).compile(tmpdir='.', "
             "target=os.path.basename(_build.extension_filename()))")
    print("+ (in the background)", sys.executable, "-c", "<link the extension with those objects>", flush=True)
    extension = subprocess.Popen([sys.executable, "-c", build], cwd=TREE, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, env=san_env)
    # every kernel of every entry, every type
    exe = os.path.join(SCRATCH, "kernels_identical")
    run([CC, *KERNEL_CFLAGS, *SAN, "-Icsrc", "tests/c/kernels_identical.c", *objs, "-lm", "-o", exe])
    isas = subprocess.run([exe, "--isas"], check=True, capture_output=True, text=True, env=env).stdout.split()
    if isas[-1] != "toy":
        fail(f"the toy entry is not offered: {isas}")
    done = subprocess.run([exe, "--quick"], capture_output=True, text=True, env=env)
    out = done.stdout
    print(out + done.stderr, end="")
    if done.returncode:
        fail(f"kernels_identical: exit status {done.returncode}")
    if not re.search(r"^int8 +\d+ cases$", out, re.M):
        fail("kernels_identical did not check int8")
    # the Python kernel tests on that extension
    log = extension.communicate()[0]
    if extension.returncode:
        fail(f"building the extension: exit status {extension.returncode}:\n{log}")
    preload = " ".join(subprocess.run([CC, f"-print-file-name={lib}"], check=True, capture_output=True,
                                      text=True).stdout.strip() for lib in ("libasan.so", "libubsan.so"))
    env["LD_PRELOAD"] = preload
    check = ("import pyrope, sys; from pyrope._engine.dtypes import storage_dtypes; "
             f"assert pyrope.__file__.startswith({TREE + os.sep!r}), pyrope.__file__; "
             "assert pyrope.supported_isas()[-1] == 'toy', pyrope.supported_isas(); "
             "assert 'int8' in [d.name for d in storage_dtypes()], storage_dtypes(); "
             "print('isas', pyrope.supported_isas(), 'dtypes', [d.name for d in storage_dtypes()])")
    run([sys.executable, "-c", check], env=env)
    run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--capture=sys", *RECIPE_TESTS], env=env)
    print("check-recipes: both recipes, applied as documented, build and pass under ASan + UBSan")


if __name__ == "__main__":
    main()
