"""`import pyrope` loads the core only, and no optional package (not ml_dtypes
either: bfloat16 works once its caller has imported it); the tools load on first
use and every public name still resolves where it did; the test oracle is not in
the package.

Each check runs in a fresh interpreter: this test process has long since
imported the tools."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from checkout import ROOT, env_with_checkout


# the optional packages (extras and the tests' own): none loads with `import pyrope`
# or the command's start, though each is installed here; ml_dtypes alone took
# longer to import than the rest of pyrope did
OPTIONAL = ("ml_dtypes", "matplotlib", "torch", "onnx", "onnxruntime", "transformers", "mpmath", "gguf")

# what rotating and its numpy-only API need; nothing else may load with `import pyrope`
CORE = {
    "pyrope", "pyrope._pyrope_cffi", "pyrope._pyrope_cffi.lib", "pyrope._engine.checks", "pyrope.errors",
    "pyrope._engine", "pyrope._engine.binding", "pyrope._engine.dtypes", "pyrope._engine.isa",
    "pyrope._engine.tables", "pyrope._engine.launcher", "pyrope._engine.plan", "pyrope._engine.sections",
    "pyrope._engine.table_cache", "pyrope._engine.locks", "pyrope._engine.general", "pyrope._engine.direct",
    "pyrope._interop", "pyrope._interop.edge", "pyrope._interop.views", "pyrope._interop.tensor_direct",
    "pyrope._interop.dlpack_devices",
    "pyrope._readers", "pyrope._readers.hf_config", "pyrope._ops", "pyrope._ops.rekey", "pyrope._ops.explicit",
    "pyrope._rules", "pyrope._rules.dynamic", "pyrope._rules.correctly_rounded",
    "pyrope.scaling", "pyrope.config", "pyrope.contract", "pyrope.rope", "pyrope.positions", "pyrope.onnx_interop",
    "pyrope.cache", "pyrope.layout", "pyrope.prepared", "pyrope.norm", "pyrope._engine.stages",
    "pyrope._engine.paged", "pyrope._engine.quantised", "pyrope.quant", "pyrope._ops.shift",
}
TOOLS = ("check", "testing", "reference", "cli", "demo", "spectrum", "benchmark")


def python(code):
    """Run `code` in a new interpreter on this checkout; return its stdout."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env=env_with_checkout())
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def loaded_after(code):
    out = python(code + "; import sys, json; print(json.dumps(sorted(m for m in sys.modules if "
                 f"m.startswith('pyrope') or m.split('.')[0] in {OPTIONAL!r})))")
    return set(json.loads(out.splitlines()[-1]))


def test_this_checkout_is_the_one_imported():
    out = python("import pyrope; print(pyrope.__file__)")
    assert os.path.dirname(os.path.abspath(out.strip())) == os.path.join(ROOT, "pyrope")


def test_import_pyrope_loads_the_core_only():
    assert loaded_after("import pyrope") == CORE


def imported_by(argv):
    """The top-level packages a fresh ``python *argv`` imports (from ``-X importtime``)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True,
                          cwd=ROOT, env=env_with_checkout())
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = [line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    return {name.split(".")[0] for name in names}, proc.stdout


def test_the_optional_packages_are_installed_here():
    # else the checks below would pass for want of the package, not for pyrope's laziness
    assert importlib.util.find_spec("ml_dtypes") is not None, "the test extra installs ml_dtypes"


@pytest.mark.parametrize("argv", [["-c", "import pyrope"], ["-m", "pyrope", "--version"],
                                  ["-m", "pyrope", "--help"], ["-c", "import pyrope.cli"]],
                         ids=["import", "--version", "--help", "cli"])
def test_no_optional_package_loads_at_start(argv):
    loaded, _ = imported_by(argv)
    assert "pyrope" in loaded
    assert not loaded & set(OPTIONAL), f"{' '.join(argv)} imported {sorted(loaded & set(OPTIONAL))}"


# bfloat16 through every way in, with ml_dtypes imported after pyrope (or before,
# {first}); prints the results' digest, and whether the first bfloat16 call (in
# place, on a fresh shape) was planned for the direct path
LATE_BFLOAT16 = """
import sys
{first}
import hashlib
import numpy as np, pyrope
from pyrope._engine import plan as _plan
assert ('ml_dtypes' in sys.modules) == {before!r}
import ml_dtypes
bf = ml_dtypes.bfloat16
rope = pyrope.Rope(64, layout='interleaved', base=10000.0)
rng = np.random.default_rng(3)
x = rng.standard_normal((2, 5, 4, 64)).astype(np.float32).astype(bf)
k = rng.standard_normal((2, 5, 2, 64)).astype(np.float32).astype(bf)
y = x.copy()
rope.apply(y, offset=7, out=y)
direct = [call is not None for call in _plan.CALLS.values()]
outs = [y, rope.apply(x, offset=7), rope.apply(x, positions=np.arange(5)[None].repeat(2, 0)),
        *rope.apply_qk(x, k, offset=3), rope.apply(x.transpose(0, 2, 1, 3), seq_axis=-2),
        rope.apply(x[:, :, :, :], offset=2, inverse=True)]
kk = k.copy()
pyrope.cache.rerotate(rope, kk, np.arange(5), np.arange(5) + 4)
cos, sin = pyrope.onnx_caches(rope, 16)
outs += [kk, pyrope.onnx_rotary_embedding(x.transpose(0, 2, 1, 3), cos.astype(bf), sin.astype(bf),
                                           np.arange(5)[None].repeat(2, 0))]
assert all(o.dtype == bf for o in outs), [o.dtype for o in outs]
try:
    rope.apply(np.ones((1, 1, 64), np.int8))
except TypeError as e:
    message = str(e)
print(hashlib.sha256(b''.join(o.tobytes() for o in outs)).hexdigest(), direct, message)
"""


def test_bfloat16_works_with_ml_dtypes_imported_after_pyrope():
    late = python(LATE_BFLOAT16.format(first="", before=False)).split(None, 1)
    early = python(LATE_BFLOAT16.format(first="import ml_dtypes", before=True)).split(None, 1)
    assert late == early, (late, early)       # the same bits, paths and messages
    assert late[1].startswith("[True] "), late  # the first call took the direct path, not the general one
    assert "float32, float16, bfloat16 (ml_dtypes), float64" in late[1]


def test_the_dtype_message_names_bfloat16_without_importing_ml_dtypes():
    out = python("import sys, numpy as np, pyrope\n"
                 "try:\n"
                 "    pyrope.Rope(8, layout='split_half').apply(np.ones((1, 1, 8), np.int8))\n"
                 "except TypeError as e:\n"
                 "    print(e, 'ml_dtypes' in sys.modules)\n")
    assert out.startswith("x must have dtype float32, float16, bfloat16 (ml_dtypes), float64 "), out
    assert out.split()[-1] == "False", out


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
    out = subprocess.run([sys.executable, "-c", code], env=env_with_checkout(), capture_output=True, text=True,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "bfloat16 needs the ml_dtypes package: pip install ml_dtypes" in out.stdout


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch (the conformance extra) is not installed")
def test_a_bfloat16_tensor_imports_ml_dtypes_itself():
    # a float32 tensor needs no ml_dtypes; a bfloat16 one brings it in, with the
    # bits a bfloat16 array of the same values gets
    out = python("import sys, torch, numpy as np, pyrope\n"
                 "rope = pyrope.Rope(64, layout='split_half')\n"
                 "t = torch.randn(2, 3, 4, 64, generator=torch.Generator().manual_seed(5))\n"
                 "rope.apply(t, offset=1)\n"
                 "print('ml_dtypes' in sys.modules)\n"
                 "y = rope.apply(t.bfloat16(), offset=1)\n"
                 "import ml_dtypes\n"
                 "want = rope.apply(t.bfloat16().view(torch.int16).numpy().view(ml_dtypes.bfloat16), offset=1)\n"
                 "print(y.dtype, np.array_equal(y.view(torch.int16).numpy(), want.view(np.int16)))\n")
    assert out.split() == ["False", "torch.bfloat16", "True"], out
