#!/usr/bin/env python
"""One-token mutation testing of one gradxform module against a chosen test selection.

    PYTHONPATH=$PWD/src /work/venv/bin/python tools/mutants.py gradxform/pieces/_moments.py \
        --tests "tests/test_pieces.py tests/test_mxnet_reference.py" [--jobs 2] [--timeout 300] \
        [--only 3,17] [--list] [--report out.md]

Each mutant changes one token of the module's code (never a docstring, string or
comment, nor an annotation) into a wrong one a user could see in a number:
  operators   & <-> |,  + <-> -,  * <-> /,  < <-> <=,  > <-> >=,  == <-> !=
  keywords    and <-> or,  True <-> False
  builtins    all <-> any,  max <-> min        (called names only)
  constants   an int n -> n + 1, a float x -> x + 1 (off by one)
The module is copied, with gradxform/, tests/ and pyproject.toml, into a scratch
directory per job (the worktree is never edited), and the selection runs there in a
fresh process per mutant (`pytest -x -q -n 0`): JAX is not fork-safe. The processes
share one JAX persistent compilation cache (a scratch directory, removed at the end):
a program is looked up by its HLO and compile options, so the unmutated code's
programs are compiled once per run and a mutant's changed programs miss. Measured on
`tests/test_schedules.py`: 5.7 s a run without the cache, 2.5 s with it warm. A mutant is *killed* when the selection
fails, *survives* when it passes, *timeout* past --timeout (counted as killed, and
listed). The unmutated module must pass the selection first.

Why not mutmut: mutmut 3.8 (tried, see docs/mutation.md) generates mutants for every
file under its source path before running any (5.5 minutes for gradxform's 73 files
on the shared 2 cores), takes the module to run from the pyproject rather than the
command line, replaces each function with a ``*args, **kwargs`` trampoline (the
project checks that signatures are truthful) and forks the test process after JAX
has started.
"""
from __future__ import annotations

import argparse
import ast
import io
import keyword
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tokenize
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPS = {"&": "|", "|": "&", "+": "-", "-": "+", "*": "/", "/": "*", "<": "<=", "<=": "<", ">": ">=",
       ">=": ">", "==": "!=", "!=": "=="}
WORDS = {"and": "or", "or": "and", "True": "False", "False": "True"}
CALLS = {"all": "any", "any": "all", "max": "min", "min": "max"}


@dataclass
class Mutant:
    index: int
    line: int
    col: int
    old: str
    new: str
    source: str  # the whole mutated module

    def describe(self, lines) -> str:
        return f"#{self.index} line {self.line}: `{self.old}` -> `{self.new}` in `{lines[self.line - 1].strip()}`"


def _bumped(text: str) -> str | None:
    body = text.replace("_", "")
    try:
        if body.isdigit():
            return str(int(body) + 1)
        value = float(body)
    except ValueError:  # hex, complex...
        return None
    return repr(value + 1.0)


def mutants(source: str) -> list[Mutant]:
    """Every one-token mutant of ``source`` (see the module docstring)."""
    toks = list(tokenize.generate_tokens(io.StringIO(source).readline))
    skip = _annotation_spans(source)
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for ln in lines:
        offsets.append(offsets[-1] + len(ln))
    out = []
    for i, tok in enumerate(toks):
        new = None
        if any(a <= tok.start < b for a, b in skip):
            continue
        nxt = toks[i + 1].string if i + 1 < len(toks) else ""
        prev = toks[i - 1].string if i else ""
        if tok.type == tokenize.OP and tok.string in OPS:
            if tok.string in "|&" and "None" in (prev, nxt):  # `float | None`: an annotation
                continue
            # `**kwargs`, `*args` and keyword-only `*` are syntax, not arithmetic
            if tok.string == "*" and (prev in ("(", ",", "") or nxt in (",", ")")):
                continue
            new = OPS[tok.string]
        elif tok.type == tokenize.NAME and tok.string in WORDS:
            new = WORDS[tok.string]
        elif tok.type == tokenize.NAME and tok.string in CALLS and nxt == "(" and prev != "def":
            new = CALLS[tok.string]
        elif tok.type == tokenize.NUMBER:
            new = _bumped(tok.string)
        if new is None or keyword.iskeyword(new) and tok.string not in WORDS:
            continue
        (row, col), (erow, ecol) = tok.start, tok.end
        start, end = offsets[row - 1] + col, offsets[erow - 1] + ecol
        out.append(Mutant(len(out), row, col, tok.string, new, source[:start] + new + source[end:]))
    return [m for m in out if _compiles(m.source)]


def _annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, end) of every annotation: types are not numbers a user sees (and under
    ``from __future__ import annotations`` never even evaluated)."""
    spans = []
    for node in ast.walk(ast.parse(source)):
        notes = []
        if isinstance(node, ast.arg):
            notes.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            notes.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            notes.append(node.annotation)
        spans += [((a.lineno, a.col_offset), (a.end_lineno, a.end_col_offset)) for a in notes if a is not None]
    return spans


def _compiles(source: str) -> bool:
    try:
        compile(source, "<mutant>", "exec")
    except SyntaxError:
        return False
    return True


def _scratch(tag: str) -> str:
    """A scratch checkout ``<tmp>/repo`` (the recorded surfaces `tests/test_surface.py` reads are
    vendored under ``tests/data/``, so nothing beside it is needed)."""
    top = tempfile.mkdtemp(prefix=f"gx_mutants_{tag}_")
    d = os.path.join(top, "repo")
    os.mkdir(d)
    shutil.copytree(os.path.join(ROOT, "src"), os.path.join(d, "src"), ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(os.path.join(ROOT, "tests"), os.path.join(d, "tests"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(os.path.join(ROOT, "pyproject.toml"), d)
    return d


def _run(workdir: str, tests: list[str], timeout: float, cache: str) -> tuple[str, float, str]:
    env = dict(os.environ, PYTHONPATH=os.path.join(workdir, "src"), PYTHONDONTWRITEBYTECODE="1")
    if cache:
        # every program, however small: the tests compile many tiny ones
        env.update(JAX_COMPILATION_CACHE_DIR=cache, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                   JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider", *tests]
    t0 = time.time()
    try:
        r = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.time() - t0, ""
    tail = (r.stdout + r.stderr).strip().splitlines()
    failed = next((ln for ln in tail if ln.startswith("FAILED") or ln.startswith("ERROR")), tail[-1] if tail else "")
    if r.returncode == 0:
        return "survived", time.time() - t0, ""
    if r.returncode == 1:
        return "killed", time.time() - t0, failed
    return f"error (pytest exit {r.returncode})", time.time() - t0, failed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("module", help="a module path under src/gradxform/, e.g. src/gradxform/pieces/_moments.py")
    ap.add_argument("--tests", required=True, help="pytest arguments: files, -k expressions (one string)")
    ap.add_argument("--jobs", type=int, default=1, help="parallel scratch copies (2 at most on 2 cores)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant run")
    ap.add_argument("--only", default="", help="comma-separated mutant numbers to run")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--report", help="write a Markdown table of the results here")
    ap.add_argument("--no-cache", action="store_true", help="no shared JAX compilation cache")
    args = ap.parse_args(argv)
    rel = os.path.relpath(os.path.abspath(args.module), ROOT)
    if not rel.startswith(os.path.join("src", "gradxform") + os.sep) or not rel.endswith(".py"):
        ap.error(f"module must be a .py file under src/gradxform/; got {args.module!r}")
    with open(os.path.join(ROOT, rel)) as f:
        source = f.read()
    lines = source.splitlines()
    todo = mutants(source)
    if args.only:
        wanted = {int(x) for x in args.only.split(",")}
        todo = [m for m in todo if m.index in wanted]
    if args.list:
        for m in todo:
            print(m.describe(lines))
        return 0
    tests = shlex.split(args.tests)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the scratch copies are removed
    dirs = [_scratch(str(j)) for j in range(max(1, args.jobs))]
    cache = "" if args.no_cache else tempfile.mkdtemp(prefix="gx_mutants_jaxcache_")
    try:
        status, secs, _ = _run(dirs[0], tests, args.timeout, cache)
        print(f"baseline: {status} in {secs:.0f} s, {len(todo)} mutants", flush=True)
        if status != "survived":
            print("the unmutated module must pass the selection", file=sys.stderr)
            return 2
        free = list(dirs)

        def one(m: Mutant):
            d = free.pop()
            try:
                with open(os.path.join(d, rel), "w") as f:
                    f.write(m.source)
                result = _run(d, tests, args.timeout, cache)
            finally:
                with open(os.path.join(d, rel), "w") as f:
                    f.write(source)
                free.append(d)
            print(f"{result[0]:>9} {result[1]:5.0f}s  {m.describe(lines)}  {result[2][:120]}", flush=True)
            return m, result

        with ThreadPoolExecutor(max_workers=len(dirs)) as pool:
            results = list(pool.map(one, todo))
    finally:
        for d in dirs:
            shutil.rmtree(os.path.dirname(d), ignore_errors=True)  # the link, not what it points to
        if cache:
            shutil.rmtree(cache, ignore_errors=True)
    killed = sum(r[0] in ("killed", "timeout") for _, r in results)
    survivors = [(m, r) for m, r in results if r[0] == "survived"]
    score = killed / len(results) if results else 1.0
    print(f"\n{rel}: {killed}/{len(results)} killed ({100 * score:.1f} %), {len(survivors)} survived")
    for m, _ in survivors:
        print("  survived", m.describe(lines))
    if args.report:
        with open(args.report, "w") as f:
            f.write(f"`{rel}` against `{args.tests}`: {killed}/{len(results)} killed ({100 * score:.1f} %)\n\n")
            f.write("| mutant | result | seconds | first failure |\n|---|---|---|---|\n")
            for m, r in results:
                cells = [m.describe(lines), r[0], f"{r[1]:.0f}", r[2][:100]]
                f.write("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
