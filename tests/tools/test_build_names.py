"""The two ways of building the extension in place, ``python pyrope/_build.py``
(``make build``) and setuptools' ``build_ext --inplace`` (what ``pip install -e .``
runs), write the same file, and each removes a build under another suffix: Python
loads ``.cpython-311-x86_64-linux-gnu.so`` before ``.abi3.so``, so a leftover of
one build used to shadow every later build of the other.

Built in a temporary copy of the tree (never the checkout the tests import), at
-O0: only the file names are under test, and the import of the result."""
import glob
import importlib.machinery
import importlib.util
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def builder():
    spec = importlib.util.spec_from_file_location("_pyrope_build_names", os.path.join(ROOT, "pyrope", "_build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def extensions(tree):
    """The files in ``tree``'s package that `import pyrope._pyrope_cffi` could load."""
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(tree, "pyrope", "_pyrope_cffi*"))
                  if any(p.endswith(s) for s in importlib.machinery.EXTENSION_SUFFIXES))


def run(argv, cwd):
    env = dict(os.environ, PYROPE_CFLAGS="-O0")
    proc = subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


def loaded_from(tree):
    """The file `import pyrope._pyrope_cffi` loads in ``tree``."""
    code = "import pyrope._pyrope_cffi as m, os; print(os.path.basename(m.__file__))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tree, env=dict(os.environ, PYTHONPATH=str(tree)),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_the_in_place_build_is_named_as_setuptools_names_it():
    name = builder().extension_filename()
    assert os.path.dirname(name) == "pyrope"
    suffix = os.path.basename(name)[len("_pyrope_cffi"):]
    assert suffix in importlib.machinery.EXTENSION_SUFFIXES
    if not hasattr(sys, "gettotalrefcount") and ".abi3.so" in importlib.machinery.EXTENSION_SUFFIXES:
        assert suffix == ".abi3.so"   # cffi builds for the stable ABI on a release CPython


def test_remove_shadowing_builds_removes_only_the_other_loadable_names(tmp_path):
    b = builder()
    pkg = tmp_path / "pyrope"
    pkg.mkdir()
    names = ["_pyrope_cffi" + s for s in importlib.machinery.EXTENSION_SUFFIXES]
    keep = ["_pyrope_cffi.c", "_pyrope_cffi.o", "_pyrope_cffi.cpython-310-x86_64-linux-gnu.so.bak", "other.abi3.so"]
    for n in names + keep:
        (pkg / n).write_bytes(b"")
    built = str(pkg / names[-1])
    removed = b.remove_shadowing_builds(built)
    assert sorted(os.path.basename(p) for p in removed) == sorted(names[:-1])
    assert sorted(os.listdir(pkg)) == sorted(keep + [names[-1]])


def test_both_in_place_builds_leave_one_extension_and_python_loads_it(tree):
    # a leftover of an older `make build` under the name Python tries first
    tagged = "_pyrope_cffi" + importlib.machinery.EXTENSION_SUFFIXES[0]
    open(os.path.join(tree, "pyrope", tagged), "wb").close()
    proc = run(["setup.py", "--quiet", "build_ext", "--inplace"], tree)        # what pip install -e . runs
    (name,) = extensions(tree)
    assert loaded_from(tree) == name
    # setuptools reads pyproject.toml on each build: no deprecated license table
    assert "project.license" not in proc.stderr, proc.stderr
    # and the other way round: a leftover beside `python pyrope/_build.py`, which writes the same name
    open(os.path.join(tree, "pyrope", tagged), "wb").close()
    run([os.path.join("pyrope", "_build.py")], tree)
    assert extensions(tree) == [name]
    assert loaded_from(tree) == name
    assert name == os.path.basename(builder().extension_filename())
