"""Every install hint in the repository can be run as written.

pyrope is on no package index yet (and the name ``pyrope`` on PyPI is another
project), so ``pip install 'pyrope-rotary[bfloat16]'`` finds nothing to install.
A hint installs pyrope from a path: the checkout (``.``, ``'.[gguf]'``, ``-e .``)
or a wheel built from it (``dist/pyrope_rotary-*.whl``), with extras pyproject.toml
defines; or it names a package of the index that pyproject depends on
(``pip install ml_dtypes``): never pyrope itself by a name."""
import os
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# the files a user or a message can read a hint from (build output and VCS data are not)
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".in", ".c", ".h", ".sh", ".json"}
SKIP_DIRS = {".git", "build", "dist", "__pycache__", ".pytest_cache", ".benchmarks", ".hypothesis", ".venv"}

# `pip install [flags] TARGET` (also `$(PIP) install`, `python -m pip install`), the
# target possibly quoted (also \" inside a Python string), spread over lines as prose
# wraps it; the target runs to a quote, a backtick or a space
HINT = re.compile(r"(?:\bpip3?|\$\(PIP\))\s+install\s+(?:-{1,2}[\w-]+\s+)*\\?[\"']?([^\s\"'`\\]+)")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def pyproject():
    """(distribution name, extras, names of the packages it depends on, extras included),
    from pyproject.toml (no tomllib before Python 3.11)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    project = text[text.index("[project]\n"):]
    name = re.search(r'^name = "([^"]+)"$', project, re.M).group(1)
    extras_table = text[text.index("[project.optional-dependencies]\n"):]
    extras_table = extras_table[:extras_table.index("\n[", 1)]
    extras = set(re.findall(r"^([A-Za-z0-9_-]+) = \[", extras_table, re.M))
    lists = re.findall(r"^dependencies = \[(.*?)\]", project, re.M | re.S) + \
        re.findall(r"^[A-Za-z0-9_-]+ = \[(.*?)\]", extras_table, re.M | re.S)
    needs = {normalized(NAME.match(req).group(0)) for lst in lists for req in re.findall(r'"([^"]+)"', lst)}
    return name, extras, needs


def normalized(name):
    """PEP 503: names differing in case or in runs of -_. are the same name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def text_files():
    """The files to scan; not this one, whose examples of refused hints are refused,
    nor any virtual environment's, whatever its folder is called (a user's venv made
    inside the checkout holds other projects' hints)."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")
                   and not os.path.exists(os.path.join(folder, d, "pyvenv.cfg"))]
        found += [pathlib.Path(folder, f) for f in files]
    for path in sorted(found):
        if path == pathlib.Path(__file__).resolve():
            continue
        if path.suffix in TEXT_SUFFIXES or path.name in ("Makefile", "run"):
            yield path


def hints(text):
    """(target, line number) of each `pip install TARGET` in text; the target without
    the punctuation of the sentence around it (`(or pip install gguf)`)."""
    for m in HINT.finditer(text):
        target = m.group(1).rstrip("),;:")
        if len(target) > 1 and target.endswith(".") and not target.endswith("/."):
            target = target[:-1]   # a sentence's full stop, not the path `.`
        yield target, text.count("\n", 0, m.start()) + 1


def problem(target):
    """Why `pip install TARGET` does not work as written, or None."""
    name, extras, needs = pyproject()
    if target.startswith("{"):
        return None   # {package} of a formatted message: the tests below check the messages made
    m = re.fullmatch(r"(.*?)(\[[^\]]*\])?", target)
    where, hinted_extras = m.group(1), m.group(2)
    wrong_extras = [e for e in (hinted_extras or "[]")[1:-1].split(",")
                    if e and "{" not in e and e.strip() not in extras]
    if wrong_extras:
        return f"extras {wrong_extras} are not in pyproject's {sorted(extras)}"
    if where.endswith(".whl"):
        wheel = re.sub(r"[-_.]+", "_", name).lower()
        base = where.rsplit("/", 1)[-1]
        if not (base.startswith(f"{wheel}-") or base == "*.whl"):
            return f"a wheel of another project ({name}'s are {wheel}-*.whl)"
        return None
    if where.startswith((".", "/", "$")) or "/" in where:
        return None if where in (".", "./") else "a path other than the checkout's root (hints run from there)"
    if normalized(where) in (normalized(name), "pyrope"):
        return (f"{where} by name: pyrope is on no package index yet (install it from a checkout: "
                f"pip install '.{hinted_extras or ''}')")
    if hinted_extras:
        return "extras on a name: pyrope's extras install from a path, '.[extra]'"
    if normalized(NAME.match(where).group(0)) not in needs:
        return f"{where} is not a package pyproject depends on"
    return None


def wrong_hints(text, where=""):
    return [f"{where}:{line}: pip install {target}: {why}" for target, line in hints(text)
            for why in [problem(target)] if why is not None]


def test_the_distribution_is_not_the_taken_name():
    name, _, _ = pyproject()
    assert normalized(name) != "pyrope", "the name pyrope on PyPI belongs to another project"


def test_every_install_hint_works_as_written():
    wrong, found = [], 0
    for path in text_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        found += len(list(hints(text)))
        wrong += wrong_hints(text, path.relative_to(ROOT))
    assert not wrong, "\n".join(wrong)
    assert found >= 10, f"only {found} install hints found: is the pattern still finding them?"


def test_the_scan_finds_each_form_of_hint():
    """The pattern itself: the forms the repository writes hints in, and which it refuses."""
    pip = "pip " + "install"   # split, or this file's own scan would find these examples
    text = (f"{pip} 'pyrope[plot]'\n"
            f'f"{pip} \\"pyrope-rotary[{{EXTRA}}]\\" (or {pip} gguf)"\n'
            f"`{pip}\n  'old-name[bfloat16]'`\n"
            f"$(PIP) install --quiet -e \".[test,conformance]\"\n"
            f"venv/bin/{pip} --quiet --no-deps --force-reinstall $(WHEEL_DIR)/*.whl\n"
            f"{pip} pyrope-rotary. Or {pip} '.[bfloat16,gguf]'; {pip} .\n"
            f"{pip} dist/pyrope_rotary-0.1.0-cp311-cp311-linux_x86_64.whl, {pip} dist/other-1.0.whl\n"
            f"{pip} '.[nope]' {pip} ml_dtypes {pip} numpyy {pip} ../elsewhere {pip} {{package}}\n")
    assert list(hints(text)) == [
        ("pyrope[plot]", 1), ("pyrope-rotary[{EXTRA}]", 2), ("gguf", 2), ("old-name[bfloat16]", 3),
        (".[test,conformance]", 5), ("$(WHEEL_DIR)/*.whl", 6), ("pyrope-rotary", 7), (".[bfloat16,gguf]", 7),
        (".", 7), ("dist/pyrope_rotary-0.1.0-cp311-cp311-linux_x86_64.whl", 8), ("dist/other-1.0.whl", 8),
        (".[nope]", 9), ("ml_dtypes", 9), ("numpyy", 9), ("../elsewhere", 9), ("{package}", 9)]
    refused = [line for line in wrong_hints(text)]
    assert [r.split(":")[1] for r in refused] == ["1", "2", "3", "7", "8", "9", "9", "9"], refused
    assert "on no package index yet" in refused[0] and "on no package index yet" in refused[1]
    assert "extras on a name" in refused[2]   # an old name of the distribution
    assert [why.split(": ", 2)[-1].split(" ")[0] for why in refused[5:]] == ["extras", "numpyy", "a"]


def test_the_old_hints_are_refused():
    """What README and the messages said before the rule (each must fail it)."""
    pip = "pip " + "install"
    old = (f"elsewhere the same extras are `{pip} 'pyrope-rotary[bfloat16]'`.\n"
           f"(`{pip} \"pyrope-rotary[gguf]\"`; without it an `ImportError` names the extra)\n"
           f"--plot needs matplotlib: {pip} 'pyrope-rotary[plot]'\n")
    assert len(wrong_hints(old)) == 3


# ---- the hints messages make at run time ---------------------------------------------

def message_of(call, *args):
    try:
        call(*args)
    except ImportError as exc:
        import pyrope
        assert isinstance(exc, pyrope.RopeError), type(exc)
        return str(exc)
    raise AssertionError(f"{call.__name__} raised nothing")


def assert_hints_work(message, package):
    found = [target for target, _ in hints(message)]
    assert found and found[0] == package, message
    assert not wrong_hints(message), wrong_hints(message)


def test_the_gguf_message(monkeypatch):
    import pyrope.gguf
    monkeypatch.setitem(sys.modules, "gguf", None)   # `import gguf` now raises ImportError
    message = message_of(pyrope.gguf._import_gguf)
    assert_hints_work(message, "gguf")
    assert "'.[gguf]'" in message


def test_the_matplotlib_messages(monkeypatch):
    from pyrope._bench import plot as _bench_plot
    from pyrope import spectrum
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    for message in (message_of(spectrum.require_matplotlib), message_of(_bench_plot.plot, [], "", "x.png")):
        assert_hints_work(message, "matplotlib")
        assert "'.[plot]'" in message


def test_the_ml_dtypes_hint():
    from pyrope._engine import dtypes as _dtypes
    assert_hints_work("bfloat16 needs the ml_dtypes package: " + _dtypes.ML_DTYPES_HINT, "ml_dtypes")


def test_the_torch_message(monkeypatch):
    import importlib
    monkeypatch.setitem(sys.modules, "torch", None)
    for name in ("pyrope.integrations.transformers", "pyrope.integrations._hf_rotary"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    message = message_of(importlib.import_module, "pyrope.integrations.transformers")
    assert_hints_work(message, "torch")
    assert "transformers" in message
