"""A Trainer's first ``save_states``, ``load_states`` and ``trainer.params``
beside its first step, over many small leaves (issue 40, item 2).

    python benchmarks/bench_checkpoint_scale.py                       # 500, 5000, 20000 leaves
    python benchmarks/bench_checkpoint_scale.py --leaves 500 --repeat 5
    python benchmarks/bench_checkpoint_scale.py --root /path/to/older/checkout   # the same, older code

Each measurement runs in a fresh Python process (so nothing compiled or
allocated by one is reused, or hides, in another): the Trainer is built over
N float32 vectors of 16 elements (``--size``), ``gradxform.Trainer(params,
'adam', ...)``, one ``step`` is taken, then the one operation measured runs.
``step``: construction plus the first step (the wall time to the first
result), the figure the others are set beside. ``save``: the first
``save_states``; ``load``: the first ``load_states`` of that file (a Trainer
that has not saved); ``params``: the first ``trainer.params`` (and
``params2``, the second). Memory: the operation's own peak resident memory
above the process's resident memory when it started (Linux: the peak is
reset through ``/proc/self/clear_refs`` just before; elsewhere the rise of
``ru_maxrss``, which hides a peak below the step's). Medians over
``--repeat`` processes. A process past ``--timeout`` seconds or
``--max-rss-gb`` (default 6 GB: the machine is shared) is killed and reported
as such. Not a test: nothing here asserts (tests/test_checkpoint_scale.py
counts the compiled programs instead).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, HERE)
from bench_scale import _run_limited  # noqa: E402

WHATS = ("step", "save", "load", "params")


def _status_mb(field: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


class _Peak:
    """The peak resident memory of what runs inside, above the resident memory at its start."""

    def __enter__(self):
        import resource  # noqa: PLC0415
        self._resource = resource
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the current VmRSS
            self.start, self.exact = _status_mb("VmRSS"), True
        except OSError:
            self.start, self.exact = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, False
        return self

    def __exit__(self, *exc):
        peak = _status_mb("VmHWM") if self.exact else \
            self._resource.getrusage(self._resource.RUSAGE_SELF).ru_maxrss / 1024
        self.mb = max(0.0, peak - self.start)


def child(what: str, leaves: int, size: int, fname: str, root: str) -> dict:
    sys.path.insert(0, root)
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    import gradxform  # noqa: PLC0415

    rng = np.random.default_rng(0)
    params = {f"p{i:05d}": jnp.asarray(rng.standard_normal(size, np.float32)) for i in range(leaves)}
    grads = {k: rng.standard_normal((1, size)).astype(np.float32) * 1e-3 for k in params}
    jax.block_until_ready(params)
    out: dict = {"gradxform": os.path.dirname(gradxform.__file__)}
    with _Peak() as peak:
        t0 = time.perf_counter()
        tr = gradxform.Trainer(params, "adam", {"learning_rate": 1e-3})
        tr.step(grads, 1)
        jax.block_until_ready(tr._params)
        out["step_s"] = time.perf_counter() - t0
    out["step_mb"] = peak.mb
    if what == "step":
        return out
    with _Peak() as peak:
        t0 = time.perf_counter()
        if what == "save":
            tr.save_states(fname)
            out["file_kb"] = os.path.getsize(fname) / 1024
        elif what == "load":
            tr.load_states(fname)
            jax.block_until_ready(tr._params)
        else:
            jax.block_until_ready(tr.params)
        out[f"{what}_s"] = time.perf_counter() - t0
    out[f"{what}_mb"] = peak.mb
    if what == "params":
        t0 = time.perf_counter()
        jax.block_until_ready(tr.params)
        out["params2_s"] = time.perf_counter() - t0
    return out


def _one(what, leaves, args, fname):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", what, "--leaves", str(leaves),
           "--size", str(args.size), "--file", fname, "--root", args.root]
    proc, why = _run_limited(cmd, args.timeout, args.max_rss_gb)
    if why:
        return None, f"killed: {why}"
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-2:]
        return None, f"failed (rc {proc.returncode}): {' | '.join(tail)}"
    return json.loads(lines[-1][7:]), None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--leaves", default="500,5000,20000", help="comma-separated leaf counts")
    ap.add_argument("--size", type=int, default=16, help="elements per leaf")
    ap.add_argument("--repeat", type=int, default=3, help="processes per measurement (medians)")
    ap.add_argument("--root", default=ROOT, help="the checkout whose gradxform is measured")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--max-rss-gb", type=float, default=6.0, help="kill a process above this resident memory")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--file", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.root = os.path.abspath(args.root)
    if args.child:
        r = child(args.child, int(args.leaves), args.size, args.file, args.root)
        print("RESULT " + json.dumps(r), flush=True)
        return
    print(f"gradxform from {args.root}; Trainer 'adam', float32 leaves of {args.size}; {os.cpu_count()} CPU "
          f"cores, load {os.getloadavg()[0]:.1f}; medians of {args.repeat} processes each; "
          "seconds (peak MB above the start)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for leaves in [int(x) for x in args.leaves.split(",") if x.strip()]:
            fname = os.path.join(tmp, f"trainer{leaves}.states")
            cells, size = [], None
            for what in WHATS:
                got, why = [], None
                for _ in range(args.repeat):
                    r, why = _one(what, leaves, args, fname)
                    if r is None:
                        break
                    got.append(r)
                    size = r.get("file_kb", size)
                if why:
                    cells.append(f"{what} {why}")
                    if what == "save":  # nothing to load
                        break
                    continue
                med = {k: statistics.median(r[k] for r in got) for k in got[0] if k.startswith(what)}
                cell = f"{what} {med[what + '_s']:.2f} s ({med[what + '_mb']:.0f} MB)"
                if what == "params":
                    cell += f", again {med['params2_s']:.3f} s"
                cells.append(cell)
            kb = f"; file {size:.0f} KB" if size is not None else ""
            print(f"{leaves:6d} leaves: " + "  ".join(cells) + kb, flush=True)


if __name__ == "__main__":
    main()
