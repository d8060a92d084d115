"""The shape of the package, checked: the rules a contributor would otherwise only read about.

* Code outside ``gradxform/pieces`` and ``gradxform/schedules`` reaches them through their public
  ``__init__`` or their declared ``internal`` surface, never through a private module.
* No module over 600 lines.
"""
import ast
import os
import pathlib
import subprocess
import sys

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "src" / "gradxform"
MODULES = sorted(PACKAGE.rglob("*.py"))
SURFACED = ("pieces", "schedules")


def _private_imports(path: pathlib.Path) -> list[str]:
    rel = path.relative_to(PACKAGE).parts
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level > 0:
            parts = node.module.split(".")
            if (len(parts) >= 2 and parts[0] in SURFACED and parts[0] != rel[0] and parts[1].startswith("_")):
                found.append(f"line {node.lineno}: from {'.' * node.level}{node.module}")
    return found


def test_no_imports_into_private_modules_of_pieces_or_schedules():
    offenders = {str(p.relative_to(PACKAGE)): found for p in MODULES if (found := _private_imports(p))}
    assert offenders == {}, "import from gradxform.<pkg>.internal (or the public package) instead"


def test_internal_surfaces_export_what_they_import():
    import gradxform.pieces.internal as pieces_internal  # noqa: PLC0415
    import gradxform.schedules.internal as schedules_internal  # noqa: PLC0415

    for mod in (pieces_internal, schedules_internal):
        assert mod.__all__ and all(hasattr(mod, name) for name in mod.__all__)


def test_no_module_over_600_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in MODULES if (n := len(p.read_text().splitlines())) > 600}
    assert long == {}


def test_the_generated_re_exports_are_current():
    # the family packages re-export their declared optimizers' factories and classes, gradxform.pieces
    # its modules' PUBLIC, as plain imports (a type checker sees them); tools/gen_exports.py writes them
    root = pathlib.Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "tools" / "gen_exports.py"), "--check"], cwd=root,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(root / "src")})
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_script_beside_a_clone_named_gradxform_imports_the_package(tmp_path):
    # issue 39: run from a clone's parent, the clone's folder (no __init__.py) was taken for a namespace
    # package ("module 'gradxform' has no attribute 'create'"); with the src/ layout the installed
    # package is the only thing named gradxform on the path
    clone = tmp_path / "gradxform"
    (clone / "tests").mkdir(parents=True)
    (clone / "README.md").write_text("a clone\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the package as pip installed it
    done = subprocess.run([sys.executable, "-c", "import gradxform; print(gradxform.create.__name__)"],
                          cwd=tmp_path, capture_output=True, text=True, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "create", done.stdout + done.stderr
