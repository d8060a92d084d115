"""Counts, over gradxform/, what issue 26 wants gone (or nearly): closure reads,
``__signature__`` assignments, use of the registry's private ``_REGISTRY``
outside ``_registry.py``, gradxform imports inside functions, import
cycles among gradxform modules (top-level imports only, from the AST), and
registered optimizer names written by hand in the family packages (string
constants other than docstrings that name one, ``"mxnet.adam"`` or
``"mindspore.AdamWeightDecay"``: the owner's name comes from its registration),
calls of ``locals()`` (issue 37: arguments are passed by name), and range bounds written as
literals in a piece's check (issue 37: a range is declared once, in `gradxform._ranges` or the
optimizer's `Declaration`, and the checks read it).

    PYTHONPATH=$PWD/src python tools/spine_check.py [-v]

Prints one count per line (``-v``: where each one is). Exit status 0: it
reports, it does not judge (the targets are in issue 26).
"""
from __future__ import annotations

import ast
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PKG = ROOT / "src" / "gradxform"
CLOSURE_NAMES = ("__closure__", "cell_contents", "co_freevars")


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT / "src").with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def resolve(mod: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` names (relative ones resolved)."""
    if not node.level:
        return node.module or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def targets(mod: str, is_pkg: bool, node, modules: set) -> list[str]:
    """The gradxform modules an import statement loads."""
    out = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        # ``from X import a``: the submodule X.a where there is one (X is its
        # package, already being imported), else X itself
        base = resolve(mod, is_pkg, node)
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    for name in names:
        if name in modules:
            out.append(name)
    return out


def _name_pattern(families) -> re.Pattern:
    """``family.name`` in a string, for the registry's families (mxnet, mindspore, paddle, neutral)."""
    return re.compile(rf"\b({'|'.join(sorted(families))})\.([A-Za-z_][A-Za-z0-9_]*)")


def _docstrings(tree) -> set:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def registered() -> set:
    """The registered names, normalised as the registry does (case and underscores ignored)."""
    sys.path.insert(0, str(ROOT))
    import gradxform  # noqa: PLC0415  (a tool: reads the registry of the checkout it runs in)
    return {k.lower().replace("_", "") for k in gradxform.registered_names()}


def owner_literals(path: pathlib.Path, tree, names: set) -> list[str]:
    docs = _docstrings(tree)
    pattern = _name_pattern({n.split(".", 1)[0] for n in names})
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            for fam, name in pattern.findall(node.value):
                if f"{fam}.{name}".lower().replace("_", "") in names:
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno} {fam}.{name}")
    return out


def scan():
    files = sorted(PKG.rglob("*.py"))
    modules = {module_name(f): f for f in files}
    found = {"closure reads": [], "__signature__ assignments": [], "_REGISTRY outside _registry.py": [],
             "gradxform imports inside functions": [], "owner names written by hand in the families": [],
             "locals() calls": [], "literal range bounds in pieces": [],
             "optimizers finished outside Setup.build": []}
    names = registered()
    families = {n.split(".", 1)[0] for n in names}  # the registry's: mxnet, mindspore, paddle, neutral
    graph: dict[str, set] = {m: set() for m in modules}
    for mod, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        is_pkg = path.name == "__init__.py"
        where = lambda n: f"{path.relative_to(ROOT)}:{n.lineno}"  # noqa: E731
        if path.relative_to(PKG).parts[0] in families:
            found["owner names written by hand in the families"] += owner_literals(path, tree, names)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in CLOSURE_NAMES:
                found["closure reads"].append(where(node))
            if isinstance(node, ast.Constant) and node.value in CLOSURE_NAMES:
                found["closure reads"].append(where(node))
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                tgts = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Attribute) and t.attr == "__signature__" for t in tgts):
                    found["__signature__ assignments"].append(where(node))
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setattr" and \
                    any(isinstance(a, ast.Constant) and a.value == "__signature__" for a in node.args):
                found["__signature__ assignments"].append(where(node))
            if isinstance(node, (ast.Name, ast.Attribute)) and path.name != "_registry.py" and \
                    (getattr(node, "id", None) == "_REGISTRY" or getattr(node, "attr", None) == "_REGISTRY"):
                found["_REGISTRY outside _registry.py"].append(where(node))
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "locals":
                found["locals() calls"].append(where(node))
            if path.relative_to(PKG).parts[0] in families and _builds_by_hand(node):
                found["optimizers finished outside Setup.build"].append(where(node))
            if path.relative_to(PKG).parts[0] == "pieces" and _literal_bounds(node):
                found["literal range bounds in pieces"].append(where(node))
            if isinstance(node, ast.alias) and node.name == "_REGISTRY" and path.name != "_registry.py":
                found["_REGISTRY outside _registry.py"].append(f"{path.relative_to(ROOT)} (imported)")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(node):
                    if isinstance(sub, (ast.Import, ast.ImportFrom)) and targets(mod, is_pkg, sub, set(modules)):
                        found["gradxform imports inside functions"].append(where(sub))
        for node in tree.body:  # top-level imports (also those under `if`/`try` at module level)
            if _type_checking_only(node):
                continue  # `if TYPE_CHECKING:` imports never run: annotations, not a runtime cycle
            for sub in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) else ():
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    graph[mod].update(t for t in targets(mod, is_pkg, sub, set(modules)) if t != mod)
    found = {k: sorted(set(v)) for k, v in found.items()}  # nested functions are walked twice
    found["import cycles"] = [" -> ".join(c) for c in cycles(graph)]
    return found


def _literal_bounds(node) -> bool:
    """A call of ``check_range`` with a number for ``low`` or ``high``."""
    return (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "check_range"
            and any(k.arg in ("low", "high") and isinstance(k.value, ast.Constant) for k in node.keywords))


def _builds_by_hand(node) -> bool:
    """A family module that finishes an optimizer itself (``finalize(...)``,
    ``o.finish(...)``) or defines a ``build`` of its own, instead of passing its
    rule to the one builder (`gradxform._optimizer.Setup.build`)."""
    if isinstance(node, ast.Call):
        f = node.func
        return getattr(f, "id", None) == "finalize" or getattr(f, "attr", None) == "finish"
    return isinstance(node, ast.FunctionDef) and node.name == "build"


def _type_checking_only(node) -> bool:
    test = getattr(node, "test", None) if isinstance(node, ast.If) else None
    return getattr(test, "id", None) == "TYPE_CHECKING" or getattr(test, "attr", None) == "TYPE_CHECKING"


def cycles(graph: dict) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan),
    each as the list of its modules; a package importing its own submodule
    and that submodule importing the package's name counts (it is a cycle)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main(argv) -> int:
    verbose = "-v" in argv
    for what, where in scan().items():
        print(f"{what}: {len(where)}")
        if verbose:
            for w in where:
                print(f"    {w}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
