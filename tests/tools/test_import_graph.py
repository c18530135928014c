"""The package's imports, deferred ones (inside functions) included, read from
the source: no module may reach itself through them (an import circle lives
only as long as one of its edges stays deferred), the core that ``import
pyrope`` loads imports no tool module, not even inside a function, and each
private layer folder keeps to its rule (docs/ARCHITECTURE.md)."""
import ast
import pathlib

import pyrope

PACKAGE = pathlib.Path(pyrope.__file__).parent
# gguf loads on first use (it needs the gguf package) but is a reader, as config is:
# Rope.from_gguf calls it
TOOLS = {"pyrope." + name for name in pyrope._LAZY_SUBMODULES if name != "gguf"} | {
    "pyrope._bench", "pyrope.integrations"}
EXTENSION = "pyrope._pyrope_cffi"   # the compiled binding: a leaf


def module_name(path):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
MODULES[EXTENSION] = None


def resolve(name):
    """The module an import of ``name`` loads last: itself, else the package holding it."""
    if name.startswith(EXTENSION):
        return EXTENSION
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def imports(name):
    """The pyrope modules module ``name`` imports, anywhere in its code."""
    path = MODULES[name]
    if path is None:
        return set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {resolve(a.name) for a in node.names if a.name.split(".")[0] == "pyrope"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            elif (node.module or "").split(".")[0] == "pyrope":
                target = node.module
            else:
                continue
            for alias in node.names:   # `from . import x`: the submodule x when there is one
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else resolve(target))
    found.discard(name)
    return found


GRAPH = {name: imports(name) for name in MODULES}


def circles():
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(GRAPH[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return out


def test_the_graph_is_read():
    """The test below can fail: the reader sees the edges that matter."""
    assert "pyrope._engine.tables" in GRAPH["pyrope.rope"]
    assert "pyrope.rope" in GRAPH["pyrope.config"]
    assert "pyrope.benchmark" in GRAPH["pyrope.cli"]          # a deferred import
    assert "pyrope" in GRAPH["pyrope.integrations._hf_rotary"]   # `from .. import Rope`


def test_no_import_circle():
    assert circles() == []


def test_only_the_binding_imports_the_extension():
    """The engine's other modules that call C take ffi and lib from the binding;
    the benchmark report opens the extension's file (its digest), not its lib."""
    importers = sorted(m for m in GRAPH if EXTENSION in GRAPH[m])
    assert importers == ["pyrope._bench.report", "pyrope._engine.binding"], importers


def test_the_core_imports_no_tool():
    core = {name for name in MODULES if name.startswith("pyrope") and name not in TOOLS
            and not any(name.startswith(t + ".") for t in TOOLS) and name not in ("pyrope", "pyrope.__main__")}
    reached = {f"{m} -> {t}" for m in sorted(core) for t in GRAPH[m]
               if t in TOOLS or any(t.startswith(x + ".") for x in TOOLS)}
    assert not reached, reached


def under(name, package):
    return name == package or name.startswith(package + ".")


def edges_from(package):
    return {(m, t) for m in GRAPH if under(m, package) for t in GRAPH[m]}


# what each private layer may not import (anything under these names)
FORBIDDEN = {
    # the engine: no Rope, no adapter, no reader, no operation on ropes, no tool, no public
    # module (errors and the compiled binding aside)
    "pyrope._engine": ("pyrope.rope", "pyrope._interop", "pyrope._readers", "pyrope._ops", "pyrope.scaling",
                       "pyrope.config", "pyrope.contract", "pyrope.cache", "pyrope.positions", "pyrope.layout",
                       "pyrope.onnx_interop", "pyrope.gguf", *sorted(TOOLS)),
    # the adapters view and convert; they take ropes as arguments, never import them
    "pyrope._interop": ("pyrope.rope", "pyrope._readers", "pyrope._ops", "pyrope.config", "pyrope.gguf",
                        *sorted(TOOLS)),
    # readers return arguments: no Rope, no engine but its argument checks, no adapter
    "pyrope._readers": ("pyrope.rope", "pyrope._engine", "pyrope._interop", "pyrope._ops", "pyrope.config",
                        *sorted(TOOLS)),
    "pyrope._rules": ("pyrope.rope", "pyrope._engine", "pyrope._interop", "pyrope._readers", "pyrope._ops",
                      *sorted(TOOLS)),
}
ALLOWED = {   # the one module of a banned layer a layer may import
    "pyrope._readers": ("pyrope._engine.checks",),
    "pyrope._rules": ("pyrope._engine.checks",),
    # operations on ropes get the Rope class as an argument
    "pyrope._ops": ("pyrope.rope", "pyrope.cache", "pyrope.positions", "pyrope.config", *sorted(TOOLS)),
}


def test_each_layer_keeps_to_its_rule():
    broken = sorted(f"{m} -> {t}" for package, banned in FORBIDDEN.items() for m, t in edges_from(package)
                    if any(under(t, b) for b in banned) and t not in ALLOWED.get(package, ()))
    assert not broken, broken


def test_the_private_modules_live_in_their_layers():
    """Flat private modules left at the top, each for a stated reason."""
    flat = sorted(n for n in MODULES if n.count(".") == 1 and n.split(".")[1].startswith("_")
                  and n != EXTENSION and MODULES[n].name != "__init__.py")
    assert flat == ["pyrope.__main__", "pyrope._build", "pyrope._table_cache"], flat
