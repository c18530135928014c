"""Every third-party module the tests and benchmarks import is declared in the
extras their make target installs, so `make test` and `make bench` run on a
fresh machine, in a virtual environment that has nothing else.

A package that is merely installed (by an earlier `make bench`, or as another
package's dependency) hides a missing declaration from every other test: this
one reads the imports from the files themselves (``ast``: imports at any depth,
``pytest.importorskip("x")``, ``importlib.import_module("x")``), the extras
each target installs from the Makefile, and the extras from pyproject.toml.

What each target runs (:data:`RUN_BY`):

- ``make test`` (and ``make sanitize``, which installs the same): tests/ but tests/fuzz/, the
  python blocks of the documents tests/tools/test_readme.py runs, and setup.py and
  pyrope/_build.py, which tests/tools/test_build_names.py and ``make sanitize`` run
  with the test environment's Python;
- ``make bench``: bench/;
- ``make fuzz``: tests/fuzz/ (the fuzz targets' drivers).

Runtime dependencies count for both. The project's own modules (:func:`own_modules`)
are not third party; neither is the standard library (``sys.stdlib_module_names``)."""
import ast
import importlib.metadata
import pathlib
import re
import sys

import pytest

import readme_blocks
from test_readme import DOCUMENTS

ROOT = pathlib.Path(__file__).resolve().parents[2]

# make target -> [(name, text)]: the sources whose imports its extras must cover
RUN_BY = {
    "test": lambda: [*(f for f in files("tests") if not f[0].startswith("tests/fuzz/")), *files("setup.py"),
                     *files("pyrope/_build.py"), *document_blocks()],
    "bench": lambda: files("bench"),
    "fuzz": lambda: files("tests/fuzz"),   # the fuzz targets' drivers (atheris), which `make fuzz` installs
}

# import names whose distribution has another name, for when the distribution is
# not installed (installed ones are found by importlib.metadata.packages_distributions)
DISTRIBUTION_OF = {
    "yaml": "PyYAML",
    "PIL": "Pillow",
    "cv2": "opencv-python",
    "sklearn": "scikit-learn",
    "dateutil": "python-dateutil",
    "google.protobuf": "protobuf",
}

# built at run time from the project's own code: bench/race.py makes an older
# commit's pyrope importable as pyrope_old
GENERATED = {"pyrope_old"}
# the standard library: sys.stdlib_module_names, and tomllib on Python 3.10, where
# this test imports it only to skip
STDLIB = set(sys.stdlib_module_names) | {"tomllib"}


def normalized(name):
    """PEP 503: names differing in case or in runs of -_. are the same name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def files(path):
    """[(path relative to the root, text)] of a .py file, or of the .py files under a folder."""
    root = ROOT / path
    paths = [root] if root.is_file() else sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    return [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in paths]


def document_blocks():
    """[(document, text)] of the python blocks tests/tools/test_readme.py runs, each text
    padded so that its line numbers are the document's."""
    return [(document, "\n" * (b.line - 1) + b.text) for document in DOCUMENTS
            for b in readme_blocks.fenced_blocks(ROOT / document) if b.language == "python"]


def own_modules():
    """The package, the helpers and test modules tests/ and bench/ import one another by
    (tests/support, each test's folder and bench/ are on sys.path when pytest runs
    them), and :data:`GENERATED`."""
    names = {"pyrope"} | GENERATED
    folders = [ROOT / "tests", *sorted(p for p in (ROOT / "tests").iterdir() if p.is_dir()), ROOT / "bench"]
    for folder in folders:
        for path in folder.iterdir():
            if path.suffix == ".py" or (path / "__init__.py").exists():
                names.add(path.stem)
    return names


def _literal(node):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def imported_modules(source):
    """[(module, line)] of every absolute import in ``source``: import statements
    at any depth, and importorskip / import_module / __import__ of a literal name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.append((node.module, node.lineno))
        elif isinstance(node, ast.Call) and node.args and _literal(node.args[0]):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in ("importorskip", "import_module", "__import__"):
                found.append((_literal(node.args[0]), node.lineno))
    return sorted(found, key=lambda found: found[1])


def distributions_of(module, installed):
    """The names (normalized) of the distributions that may provide ``module``:
    :data:`DISTRIBUTION_OF`'s, else those ``installed`` (packages_distributions())
    names, else the import name itself."""
    for name, dist in DISTRIBUTION_OF.items():
        if module == name or module.startswith(name + "."):
            return {normalized(dist)}
    top = module.split(".")[0]
    return {normalized(d) for d in installed.get(top, [])} or {normalized(top)}


def third_party_imports(sources, installed):
    """[(where, module, distributions)] for every import in ``sources`` of a module
    that is neither the standard library's nor the project's."""
    own = own_modules()
    return [(f"{name}:{line}", module, distributions_of(module, installed))
            for name, text in sources for module, line in imported_modules(text)
            if module.split(".")[0] not in STDLIB | own]


# ---- what pyproject.toml declares ---------------------------------------------

def _table(text, header):
    """The body of a top-level TOML table (up to the next table header)."""
    start = text.index(f"\n[{header}]\n") + len(header) + 4
    end = re.search(r"^\[", text[start:], re.M)
    return text[start:start + end.start()] if end else text[start:]


def _strings(array_body, what):
    """The strings of a TOML array of strings; anything else in it fails."""
    body = re.sub(r"(?m)^\s*#.*$", "", array_body)
    strings = re.findall(r'"([^"\\]*)"', body)
    rest = re.sub(r'"[^"\\]*"', "", body)
    assert re.fullmatch(r"[\s,]*", rest), f"pyproject.toml: {what} is not a plain array of strings"
    return strings


def declared():
    """(runtime requirements, {extra: requirements}) from pyproject.toml, read as the
    plain arrays of strings it has (no tomllib before Python 3.11;
    test_declared_matches_tomllib checks this reading where tomllib exists)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    project = _table(text, "project")
    runtime = re.search(r"^dependencies = \[(.*?)\]", project, re.M | re.S)
    extras = {name: _strings(body, f"the extra {name}") for name, body in
              re.findall(r"^([A-Za-z0-9_-]+) = \[(.*?)\]", _table(text, "project.optional-dependencies"),
                         re.M | re.S)}
    return _strings(runtime.group(1), "dependencies"), extras


def requirement_name(requirement):
    return normalized(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1))


# ---- what the Makefile installs -----------------------------------------------

def make_rules():
    """{target: (prerequisites, recipe lines)} of the Makefile's explicit rules."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8").replace("\\\n", " ")
    rules, current = {}, None
    for line in text.splitlines():
        if line.startswith("\t"):
            if current:
                for target in current:
                    rules[target][1].append(line.strip())
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = re.match(r"([^\s:=#][^:=#]*?)\s*:(?!=)(.*)$", line)
        current = m.group(1).split() if m else None
        for target in current or []:
            rules.setdefault(target, ([], []))[0].extend(m.group(2).split("#")[0].split())
    return rules


INSTALL_EXTRAS = re.compile(r"\bpip\b.*\binstall\b.*?[\"']?\.\[([A-Za-z0-9_,-]+)\]")


def extras_installed_by(target, rules=None, seen=None):
    """The extras the pip installs of ``target``'s recipe and of its prerequisites'
    recipes name (``$(PIP) install -e ".[test,bench]"``)."""
    rules = make_rules() if rules is None else rules
    seen = set() if seen is None else seen
    if target in seen or target not in rules:
        return set()
    seen.add(target)
    prerequisites, recipe = rules[target]
    extras = {e for line in recipe for m in INSTALL_EXTRAS.finditer(line.replace("$(PIP)", "pip"))
              for e in m.group(1).split(",")}
    for prerequisite in prerequisites:
        extras |= extras_installed_by(prerequisite, rules, seen)
    return extras


# ---- the tests -------------------------------------------------------------------

@pytest.mark.parametrize("target", sorted(RUN_BY))
def test_every_third_party_import_is_declared_in_an_extra_the_target_installs(target):
    runtime, extras = declared()
    installs = extras_installed_by(target)
    assert installs, f"the Makefile's `make {target}` installs no extras this test can find"
    assert installs <= set(extras), f"`make {target}` installs extras pyproject.toml lacks: {installs - set(extras)}"
    have = {requirement_name(r) for r in runtime} | {requirement_name(r) for e in installs for r in extras[e]}
    installed = importlib.metadata.packages_distributions()
    imports = third_party_imports(RUN_BY[target](), installed)
    assert imports, f"no third-party import found in what `make {target}` runs"
    missing = [f"{where}: {module} ({' or '.join(sorted(dists))})"
               for where, module, dists in imports if not dists & have]
    assert not missing, (f"imported, but in no extra `make {target}` installs ({', '.join(sorted(installs))}) "
                         "nor a runtime dependency:\n" + "\n".join(missing))


def test_imports_are_found_at_any_depth_and_mapped_to_their_distribution():
    source = ("import os, numpy\nfrom onnx import helper\nfrom . import sibling\n"
              "def f():\n    import onnxruntime as ort\n    from PIL import Image\n"
              "    yaml = pytest.importorskip('yaml')\n"
              "    llama = pytest.importorskip('transformers.models.llama')\n"
              "    importlib.import_module('ml_dtypes')\n")
    assert imported_modules(source) == [
        ("os", 1), ("numpy", 1), ("onnx", 2), ("onnxruntime", 5), ("PIL", 6),
        ("yaml", 7), ("transformers.models.llama", 8), ("ml_dtypes", 9)]
    assert distributions_of("PIL", {}) == {"pillow"}
    assert distributions_of("yaml", {"yaml": ["SomethingElse"]}) == {"pyyaml"}
    assert distributions_of("onnxruntime", {}) == {"onnxruntime"}
    assert distributions_of("ml_dtypes", {}) == {"ml-dtypes"}
    assert distributions_of("thing", {"thing": ["thing-dist"]}) == {"thing-dist"}


def test_the_project_and_the_standard_library_are_not_third_party():
    # this file imports the standard library, pytest and the tests' own helpers
    found = {module for _, module, _ in third_party_imports(files("tests/tools/test_declared_imports.py"), {})}
    assert found == {"pytest"}
    assert {"pyrope", "tolerance", "hf_peer", "readme_blocks", "test_readme", "conftest", "race"} <= own_modules()


def test_the_makefile_reading_follows_prerequisites():
    rules = {"test": (["install-test"], ["$(PYTHON) -m pytest -q"]),
             "install-test": (["build/.stamp"], []),
             "build/.stamp": (["pyproject.toml"], ['$(PIP) install --quiet -e ".[test,conformance]"', "touch $@"]),
             "demo": (["install"], []), "install": ([], ["$(PIP) install --quiet -e ."])}
    assert extras_installed_by("test", rules) == {"test", "conformance"}
    assert extras_installed_by("demo", rules) == set()
    assert {"test", "sanitize", "bench"} <= set(make_rules())


def test_declared_matches_tomllib():
    tomllib = pytest.importorskip("tomllib")   # Python 3.11+
    with open(ROOT / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    assert declared() == (project["dependencies"], project["optional-dependencies"])
