"""Runs each golden case of a tools/ script in its own Python process (so a
framework's global state, e.g. Paddle's parameter-name counters, starts fresh),
printing ok/FAIL per case."""
from __future__ import annotations

import subprocess
import sys


def run_cases(script: str, names, only) -> dict:
    """``python script --case NAME`` for each of ``names`` (those in ``only``
    when given); returns ``{name: last error line}`` for the failures."""
    failures = {}
    for name in names:
        if only and name not in only:
            continue
        r = subprocess.run([sys.executable, script, "--case", name], capture_output=True, text=True)
        if r.returncode == 0:
            print("ok  ", name, flush=True)
        else:
            lines = r.stderr.strip().splitlines()
            tail = [ln for ln in lines if "Error" in ln][-1:] or lines[-1:] or ["?"]
            failures[name] = tail[0][:800]
            print("FAIL", name, tail[0][:300], flush=True)
    return failures
