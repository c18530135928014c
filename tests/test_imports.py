"""`import pyrope` loads the core only; the tools load on first use and every
public name still resolves where it did; the test oracle is not in the package.

Each check runs in a fresh interpreter: this test process has long since
imported the tools."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HEAVY = ("matplotlib", "torch", "onnx", "onnxruntime", "transformers", "mpmath")

# what rotating and its numpy-only API need; nothing else may load with `import pyrope`
CORE = {
    "pyrope", "pyrope._pyrope_cffi", "pyrope._pyrope_cffi.lib", "pyrope._kernel", "pyrope._checks",
    "pyrope._plan", "pyrope._tensors", "pyrope._sections", "pyrope._table_cache", "pyrope._explicit", "pyrope.errors", "pyrope.scaling",
    "pyrope.config", "pyrope.contract", "pyrope.rope", "pyrope.positions", "pyrope.onnx_interop",
    "pyrope.cache", "pyrope.layout", "pyrope._dynamic", "pyrope._correctly_rounded",
}
TOOLS = ("check", "testing", "reference", "cli", "demo", "spectrum", "benchmark")


def python(code):
    """Run `code` in a new interpreter on this checkout; return its stdout."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def loaded_after(code):
    out = python(code + "; import sys, json; print(json.dumps(sorted(m for m in sys.modules if "
                 f"m.startswith('pyrope') or m.split('.')[0] in {HEAVY!r})))")
    return set(json.loads(out.splitlines()[-1]))


def test_this_checkout_is_the_one_imported():
    out = python("import pyrope; print(pyrope.__file__)")
    assert os.path.dirname(os.path.abspath(out.strip())) == os.path.join(ROOT, "pyrope")


def test_import_pyrope_loads_the_core_only():
    assert loaded_after("import pyrope") == CORE


def test_submodule_import_loads_that_tool_only():
    # check needs the reference; neither pulls in another tool or a heavy dependency
    assert loaded_after("import pyrope.check") == CORE | {"pyrope.check", "pyrope.reference"}
    assert loaded_after("import pyrope.testing") == CORE | {"pyrope.testing"}
    assert loaded_after("import pyrope; pyrope.spectrum.curves_for") == CORE | {"pyrope.spectrum"}


# each public name of the tools, reached the ways README and the tests reach them
LAZY_NAMES = """
import pyrope, sys
assert 'pyrope.check' not in sys.modules
assert callable(pyrope.check.sanity) and pyrope.check.SanityReport and pyrope.check.SanityError
assert pyrope.check is sys.modules['pyrope.check']
for name in ('Harness', 'TinyModel', 'KVCache', 'PagedKVCache', 'PrefixStore', 'FingerprintMismatch',
             'Trace', 'Comparison', 'KeyAudit', 'audit_keys', 'fingerprint_of'):
    assert getattr(pyrope.testing, name) is not None, name
for name in pyrope.reference.__all__:
    assert getattr(pyrope.reference, name) is not None, name
assert callable(pyrope.cli.main) and callable(pyrope.demo.render)
assert callable(pyrope.spectrum.curves_for) and callable(pyrope.spectrum.plot)
assert 'matplotlib' not in sys.modules
from pyrope.check import sanity
from pyrope import testing, reference
from pyrope.benchmark import DTYPES, SHAPES, Case, format_summary
for name in pyrope.__all__:
    getattr(pyrope, name)
listed = dir(pyrope)
for name in %r:
    assert name in listed, name
try:
    pyrope.no_such_name
except AttributeError as e:
    assert 'no_such_name' in str(e)
else:
    raise AssertionError('pyrope.no_such_name resolved')
print('ok')
""" % (TOOLS,)


def test_lazy_public_names_resolve():
    assert python(LAZY_NAMES).strip().endswith("ok")


def test_star_import_still_gives_every_public_name():
    out = python("from pyrope import *; print(check.sanity.__name__, testing.Harness.__name__, Rope.__name__)")
    assert out.split() == ["sanity", "Harness", "Rope"]


def test_reference_rules_is_not_in_the_package():
    # searched on the package's own path: an editable install of another checkout
    # on sys.meta_path must not make this pass or fail
    out = python("import importlib.machinery, pyrope; print(importlib.machinery.PathFinder.find_spec("
                 "'pyrope.reference_rules', pyrope.__path__), hasattr(pyrope, 'reference_rules'))")
    assert out.split() == ["None", "False"]
    assert python("import pyrope.reference; print('ok')").strip() == "ok"   # the public reference stays


@pytest.mark.parametrize("argv", [["-m", "pyrope", "--help"], ["-m", "pyrope", "demo", "--help"]])
def test_python_dash_m_still_runs(argv):
    proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and "usage" in proc.stdout.lower(), proc.stderr


def test_works_without_ml_dtypes():
    # ml_dtypes is an extra: without it pyrope imports and rotates the other dtypes.
    code = ("import sys; sys.modules['ml_dtypes'] = None\n"
            "import numpy as np, pyrope\n"
            "r = pyrope.Rope(8, layout='split_half')\n"
            "y = r.apply(np.ones((2, 1, 8), np.float16), offset=3)\n"
            "assert y.dtype == np.float16 and np.isfinite(y).all()\n"
            "try:\n"
            "    r.apply(np.ones((2, 1, 8), np.int8))\n"
            "except TypeError as e:\n"
            "    print(e)\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=root)
    assert out.returncode == 0, out.stderr
    assert "bfloat16 needs the ml_dtypes package" in out.stdout
