"""Docs that run (issue 39 item 2): every ```python (or ```py) block of README.md and docs/*.md runs
by itself, as a reader who copies it would run it.

Each block is written to a temporary file and run in a fresh interpreter with a time limit, 4 fake
CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count=4``), ``JAX_PLATFORMS=cpu`` and
this checkout's gradxform first on ``PYTHONPATH``. The working directory is the repository root, as
for the README's own commands: a block that needs a file (continuing from a framework's saved state)
names one of the small committed fixtures by its path from the root (``tests/fixtures/...``). A
block that writes files writes them under ``tempfile.mkdtemp()``, never in the working directory
(blocks run in parallel under xdist, all from the root).

A block that is not meant to run alone is labelled on the line before its fence with an HTML comment
starting ``<!-- fragment`` (e.g. ``<!-- fragment: continues the block above -->``); it is only
compiled. Prefer a self-contained block: add the few setup lines (imports, a tiny parameter tree, a
tiny loss) it needs.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 120  # per block; each takes 2-6 s on 2 shared cores (a JAX start and a few compiles)
FENCE = re.compile(r"^```(python|py)[ \t]*$")


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(path: Path) -> list[tuple[int, str, bool]]:
    """(line of the opening fence, code, is_fragment) for every ```python / ```py block."""
    lines = path.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        if FENCE.match(lines[i]):
            start = i
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            assert j < len(lines), f"{path.name}:{start + 1}: unclosed code block"
            prev = next((ln for ln in reversed(lines[:start]) if ln.strip()), "")
            out.append((start + 1, "\n".join(lines[start + 1:j]) + "\n", prev.strip().startswith("<!-- fragment")))
            i = j + 1
        else:
            i += 1
    return out


CASES = [(p, line, code, frag) for p in doc_files() for line, code, frag in blocks(p)]
IDS = [f"{p.relative_to(ROOT)}:{line}" for p, line, _, _ in CASES]


def run_block(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    script = tmp_path / "block.py"
    script.write_text(code)
    env = dict(os.environ)
    env.update(XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu", MPLBACKEND="Agg")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S)


def test_the_docs_have_code_and_it_is_found():
    readme = [c for c in CASES if c[0].name == "README.md"]
    assert len(readme) >= 10, "the README lost its code examples (or the block finder broke)"
    text = "\n".join((ROOT / "README.md").read_text().splitlines())
    # every fence that opens a python block is found: none hides behind indentation or a language tag
    assert len(re.findall(r"^```(?:python|py)\s*$", text, flags=re.M)) == len(readme)


@pytest.mark.parametrize("path,line,code,fragment", CASES, ids=IDS)
def test_block_runs_by_itself(path, line, code, fragment, tmp_path):
    where = f"{path.relative_to(ROOT)}:{line}"
    if fragment:
        compile(code, where, "exec")  # a labelled fragment must still be valid Python
        return
    proc = run_block(code, tmp_path)
    assert proc.returncode == 0, (f"{where}: the block fails run by itself (exit {proc.returncode}); add its "
                                  f"setup lines or label it <!-- fragment: ... -->\n{code}\n"
                                  f"{(proc.stdout + proc.stderr)[-4000:]}")


def test_the_hyperparameter_block_prints_the_refusal(tmp_path):
    """The README's set_hyper block shows the range error its comment promises."""
    code = next(c for p, _, c, _ in CASES if p.name == "README.md" and "set_hyper(state, beta1=1.5)" in c)
    proc = run_block(code, tmp_path)
    assert "beta1 must be in [0, 1); got 1.5." in proc.stdout, proc.stdout + proc.stderr


def test_every_docs_page_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in readme, f"docs/{page.name} is linked from nowhere: link it in README.md"
