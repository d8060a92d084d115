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

Starting an interpreter and importing JAX costs ~2 s of CPU, more than most blocks' own work, so the
blocks' interpreters are forked from one prepared process per test worker (``BlockRunner``): it has
imported ``jax``, ``numpy`` and ``gradxform`` (no JAX backend started, so no device or compile state to
inherit) and forks a child per block. The child is the block's own process: it starts with an empty
``__main__`` (a block that leaves out an import fails as it would for a reader), runs the block as
``python block.py`` would (``runpy`` under ``__main__``, the block's folder first on ``sys.path``, its
exit status an uncaught exception's 1 or ``sys.exit``'s code, stdout and stderr captured, atexit
handlers run), and ends; nothing it does reaches the next block.
"""
from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
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


def _block_env() -> dict:
    env = dict(os.environ)
    env.update(XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu", MPLBACKEND="Agg")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


# The prepared process: imports, then forks one child per request line (JSON: script, stdout file,
# stderr file); answers "pid N" at once and "exit N CODE" when the child ends.
_SERVER = r"""
import json, os, sys
import jax, numpy, gradxform  # what every block imports first; no backend is started here
assert not jax._src.xla_bridge._backends, "the block server must not start a JAX backend before forking"
for line in sys.stdin:
    req = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        import atexit, runpy, traceback
        os.setpgid(0, 0)
        out = os.open(req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        err = os.open(req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0); os.dup2(out, 1); os.dup2(err, 2)
        sys.stdin = open(os.devnull)
        sys.argv = [req["script"]]
        sys.path[0] = os.path.dirname(req["script"])
        code = 0
        try:
            runpy.run_path(req["script"], run_name="__main__")
        except SystemExit as e:  # as the interpreter does: None is 0, a number is the status, else printed and 1
            code = 0 if e.code is None else e.code
            if not isinstance(code, int):
                print(code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        try:
            atexit._run_exitfuncs()
        finally:
            sys.stdout.flush(); sys.stderr.flush()
            os._exit(code)
    print("pid", pid, flush=True)
    _, status = os.waitpid(pid, 0)
    print("exit", pid, os.waitstatus_to_exitcode(status), flush=True)
"""


class BlockRunner:
    """One prepared process (see the module's docstring) that runs blocks one at a time."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER], cwd=ROOT, env=_block_env(),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.pending = b""

    def _line(self, deadline: float) -> str:
        """The server's next line, or "" at the deadline (read from the pipe itself: no hidden buffer)."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.pending:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(fd, 4096) if ready else b""
            if not chunk:
                return ""
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode()

    def run(self, script: Path) -> subprocess.CompletedProcess:
        out, err = script.with_suffix(".out"), script.with_suffix(".err")
        deadline = time.monotonic() + TIMEOUT_S
        self.proc.stdin.write(json.dumps({"script": str(script), "stdout": str(out), "stderr": str(err)}) + "\n")
        self.proc.stdin.flush()
        first = self._line(deadline).split()
        assert first[:1] == ["pid"], f"the block server did not start the block (exit {self.proc.poll()})"
        done = self._line(deadline).split()
        if not done:
            os.killpg(int(first[1]), signal.SIGKILL)
            self._line(time.monotonic() + 30)  # its "exit" line
            raise subprocess.TimeoutExpired([str(script)], TIMEOUT_S, out.read_text(), err.read_text())
        return subprocess.CompletedProcess([str(script)], int(done[2]), out.read_text(), err.read_text())

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def runner():
    r = BlockRunner()
    yield r
    r.close()


def run_block(code: str, tmp_path: Path, runner: BlockRunner) -> subprocess.CompletedProcess:
    script = tmp_path / "block.py"
    script.write_text(code)
    return runner.run(script)


def test_a_block_runs_in_its_own_process_as_a_script(tmp_path, runner):
    """The forked child behaves as ``python block.py``: an empty ``__main__``, the exit status, the output."""
    probe = ("import sys, os\nassert sorted(k for k in globals() if not k.startswith('__')) == ['os', 'sys']\n"
             "assert __name__ == '__main__' and sys.argv == [__file__] and sys.path[0] == os.path.dirname(__file__)\n"
             "print('out'); print('err', file=sys.stderr)\nimport jax; jax.config.update('jax_enable_x64', True)\n"
             "assert jax.device_count() == 4\n")
    proc = run_block(probe, tmp_path, runner)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "out\n", "err\n"), proc
    proc = run_block("import jax.numpy as jnp\nassert jnp.zeros(1).dtype == jnp.float32\nnp.zeros(1)\n", tmp_path,
                     runner)
    assert proc.returncode == 1 and "NameError: name 'np' is not defined" in proc.stderr, proc  # x64 did not leak
    assert run_block("import sys\nsys.exit(3)\n", tmp_path, runner).returncode == 3


def test_the_docs_have_code_and_it_is_found():
    readme = [c for c in CASES if c[0].name == "README.md"]
    assert len(readme) >= 10, "the README lost its code examples (or the block finder broke)"
    text = "\n".join((ROOT / "README.md").read_text().splitlines())
    # every fence that opens a python block is found: none hides behind indentation or a language tag
    assert len(re.findall(r"^```(?:python|py)\s*$", text, flags=re.M)) == len(readme)


@pytest.mark.parametrize("path,line,code,fragment", CASES, ids=IDS)
def test_block_runs_by_itself(path, line, code, fragment, tmp_path, runner):
    where = f"{path.relative_to(ROOT)}:{line}"
    if fragment:
        compile(code, where, "exec")  # a labelled fragment must still be valid Python
        return
    proc = run_block(code, tmp_path, runner)
    assert proc.returncode == 0, (f"{where}: the block fails run by itself (exit {proc.returncode}); add its "
                                  f"setup lines or label it <!-- fragment: ... -->\n{code}\n"
                                  f"{(proc.stdout + proc.stderr)[-4000:]}")


def test_the_hyperparameter_block_prints_the_refusal(tmp_path, runner):
    """The README's set_hyper block shows the range error its comment promises."""
    code = next(c for p, _, c, _ in CASES if p.name == "README.md" and "set_hyper(state, beta1=1.5)" in c)
    proc = run_block(code, tmp_path, runner)
    assert "beta1 must be in [0, 1); got 1.5." in proc.stdout, proc.stdout + proc.stderr


def test_every_docs_page_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in readme, f"docs/{page.name} is linked from nowhere: link it in README.md"
