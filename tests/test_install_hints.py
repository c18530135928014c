"""Every install hint in the repository names this project's distribution, as
pyproject.toml spells it, and an extra it defines: the name ``pyrope`` on PyPI is
another project, so a hint that drifts back to it sends users to the wrong package."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]

# the files a user or a message can read a hint from (build output and VCS data are not)
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".in", ".c", ".h", ".sh", ".json"}
SKIP_DIRS = {".git", "build", "dist", "__pycache__", ".pytest_cache", ".benchmarks", ".hypothesis", ".venv"}

# `pip install [options] NAME[extras]`, the name possibly quoted (also \" inside a Python
# string), spread over lines as prose wraps it; paths (`.`, `./x`, `$(DIR)/x.whl`) are no names
HINT = re.compile(r"pip3?\s+install\s+(?:-{1,2}[\w-]+\s+)*\\?[\"']?([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]\s]*\])?")


def pyproject():
    """(distribution name, extras) from pyproject.toml (no tomllib before Python 3.11)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    project = text[text.index("[project]\n"):]
    name = re.search(r'^name = "([^"]+)"$', project, re.M).group(1)
    extras_table = text[text.index("[project.optional-dependencies]\n"):]
    extras_table = extras_table[:extras_table.index("\n[", 1)]
    extras = set(re.findall(r"^([A-Za-z0-9_-]+) = \[", extras_table, re.M))
    return name, extras


def normalized(name):
    """PEP 503: names differing in case or in runs of -_. are the same name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def text_files():
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT)
        if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.parts[:-1]):
            continue
        if path.is_file() and (path.suffix in TEXT_SUFFIXES or path.name in ("Makefile", "run")):
            yield path


def hints(text):
    """(name, extras or None, line number) of each `pip install NAME` in text."""
    for m in HINT.finditer(text):
        extras = m.group(2)
        names = None if extras is None else [e.strip() for e in extras[1:-1].split(",")]
        yield m.group(1), names, text.count("\n", 0, m.start()) + 1


def project_hints(text):
    """The hints in text that name this project: with extras, or a name starting with pyrope."""
    return [(name, extras, line) for name, extras, line in hints(text)
            if extras is not None or normalized(name).startswith("pyrope")]


def test_the_distribution_is_not_the_taken_name():
    name, _ = pyproject()
    assert normalized(name) != "pyrope", "the name pyrope on PyPI belongs to another project"


def test_every_install_hint_names_the_distribution_and_an_extra_it_has():
    name, extras = pyproject()
    wrong, found = [], 0
    for path in text_files():
        for hinted, hinted_extras, line in project_hints(path.read_text(encoding="utf-8", errors="replace")):
            found += 1
            where = f"{path.relative_to(ROOT)}:{line}"
            if normalized(hinted) != normalized(name):
                shown = hinted + (f"[{','.join(hinted_extras)}]" if hinted_extras is not None else "")
                wrong.append(f"{where}: {shown} (the distribution is {name})")
            for extra in hinted_extras or []:
                if "{" not in extra and extra not in extras:   # {EXTRA}: a formatted message
                    wrong.append(f"{where}: extra {extra!r} is not in pyproject's {sorted(extras)}")
    assert not wrong, "\n".join(wrong)
    assert found >= 4, f"only {found} install hints found: is the pattern still finding them?"


def test_the_scan_finds_each_form_of_hint():
    """The pattern itself: the forms the repository writes hints in, and what it must leave alone."""
    pip = "pip " + "install"   # split, or this file's own scan would find these examples
    text = (f"{pip} 'pyrope[plot]'\n"
            f'f"{pip} \\"pyrope[{{EXTRA}}]\\" (or {pip} gguf)"\n'
            f"`{pip}\n  'old-name[bfloat16]'`\n"
            f"{pip} --quiet -e \".[test,conformance]\"\n"
            f"{pip} --quiet --no-deps --force-reinstall $(WHEEL_DIR)/*.whl\n"
            f"{pip} pyrope\n")
    assert project_hints(text) == [("pyrope", ["plot"], 1), ("pyrope", ["{EXTRA}"], 2),
                                   ("old-name", ["bfloat16"], 3), ("pyrope", None, 7)]
    assert ("gguf", None, 2) in list(hints(text))   # a third-party package: no project hint


def test_the_gguf_message_names_the_distribution(monkeypatch):
    """A hint built at run time (not only as written in the source)."""
    import builtins
    import pyrope.gguf
    name, _ = pyproject()
    real_import = builtins.__import__

    def no_gguf(module, *args, **kwargs):
        if module == "gguf":
            raise ModuleNotFoundError("No module named 'gguf'")
        return real_import(module, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_gguf)
    try:
        pyrope.gguf._import_gguf()
    except ImportError as exc:
        message = str(exc)
    else:
        raise AssertionError("no ImportError without gguf")
    assert project_hints(message) == [(name, ["gguf"], 1)], message
