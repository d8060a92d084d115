"""First call (trace + compile + run) and peak memory of an optimizer over
many leaves, one path per subprocess.

    python benchmarks/bench_scale.py --leaves 20000
    python benchmarks/bench_scale.py --leaves 2000 --paths plain,optax
    python benchmarks/bench_scale.py --leaves 20000 --opt mindspore.adafactor --paths plain

Paths: ``plain`` (``jax.jit`` of ``create(opt).init`` and of ``.update``, fed
an ordinary tree), ``fused`` (the same through ``gradxform.fused``),
``packed`` (through ``gradxform.fused.packed``), ``flat`` (``gradxform.fused``
with `FlatTree` parameters and gradients from ``fused.ravel``: a step that owns
its flat form),
``trainer`` (``gradxform.Trainer(params, opt)`` construction and one
``step``), ``optax`` (``optax.adam``; only with ``--opt adam``), ``optax_hyper``
(``optax.inject_hyperparams(optax.adam)``: its hyperparameters runtime
scalars in the state, as gradxform's are; only with ``--opt adam``). Each path
runs in a fresh Python process; "first call" is the wall time from building
the optimizer to the first result ready, "peak" the process's peak RSS
(``ru_maxrss``), both printed per path, with the update's trace, lowering and
XLA compile times (``trace_s``, ``lower_s``, ``xla_s``), the peak RSS after
init, trace and lowering (``rss_init_gb``, ``rss_trace_gb``, ``rss_lower_gb``: XLA's
compile adds ``peak`` less ``rss_lower_gb``) and the number of state
leaves. Leaves are float32 vectors of 16 elements (``--size``), so trace and
compile dominate. A path that passes ``--timeout`` seconds or ``--max-rss-gb``
of resident memory (default 6 GB: the machine is shared) is killed and
reported as such. Not a test: nothing here asserts.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def child(path: str, leaves: int, size: int, opt: str) -> dict:
    sys.path.insert(0, ROOT)
    import resource  # noqa: PLC0415

    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    import gradxform  # noqa: PLC0415

    rng = np.random.default_rng(0)
    params = {f"p{i:05d}": jnp.asarray(rng.standard_normal(size, np.float32)) for i in range(leaves)}
    grads = {k: jnp.asarray(rng.standard_normal(size, np.float32) * 1e-3) for k in params}
    jax.block_until_ready((params, grads))
    out: dict = {}
    t0 = time.perf_counter()
    if path == "flat":
        tx = gradxform.fused(gradxform.create(opt, learning_rate=1e-3))
        state = tx.init(params)
        fp, fg = gradxform.fused.ravel(params, state), gradxform.fused.ravel(grads, state)
        out["init_s"] = time.perf_counter() - t0

        def flat_step(p, g, s):
            u, s = tx.update(g, s, p)
            return gradxform.fused.FlatTree(tuple(a + b for a, b in zip(p.buffers, u.buffers)), p.layout), s

        fp, state = jax.jit(flat_step, donate_argnums=(0, 2))(fp, fg, state)
        jax.block_until_ready(fp.buffers)
    elif path == "trainer":
        tr = gradxform.Trainer(params, opt, {"learning_rate": 1e-3})
        out["construct_s"] = time.perf_counter() - t0
        tr.step(jax.tree.map(lambda g: g[None], grads), 1)
        jax.block_until_ready(tr._params)
    else:
        if path in ("optax", "optax_hyper"):
            import optax  # noqa: PLC0415
            # optax_hyper: optax.adam with its hyperparameters in the state, as gradxform's are
            tx = optax.adam(1e-3) if path == "optax" else optax.inject_hyperparams(optax.adam)(learning_rate=1e-3)
        else:
            tx = gradxform.create(opt, learning_rate=1e-3)
            if path == "fused":
                tx = gradxform.fused(tx)
            elif path == "packed":
                tx = gradxform.fused.packed(tx)
        state = jax.jit(tx.init)(params)
        jax.block_until_ready(state)
        out["init_s"] = time.perf_counter() - t0

        def step(p, g, s):
            u, s = tx.update(g, s, p)
            return jax.tree.map(lambda a, b: a + b, p, u), s

        def rss_gb():
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20

        out["rss_init_gb"] = rss_gb()
        t1 = time.perf_counter()
        traced = jax.jit(step, donate_argnums=(0, 2)).trace(params, grads, state)
        t2 = time.perf_counter()
        out["rss_trace_gb"] = rss_gb()
        lowered = traced.lower()
        t3 = time.perf_counter()
        out["rss_lower_gb"] = rss_gb()
        compiled = lowered.compile()
        t4 = time.perf_counter()
        p, s = compiled(params, grads, state)
        jax.block_until_ready((p, s))
        out.update(trace_s=t2 - t1, lower_s=t3 - t2, xla_s=t4 - t3,
                   state_leaves=len(jax.tree.leaves(state)))
    out["first_call_s"] = time.perf_counter() - t0
    out["peak_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return out


def _rss_gb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


def _run_limited(cmd, timeout: float, max_rss_gb: float):
    """Runs ``cmd``; kills it past ``timeout`` seconds or ``max_rss_gb`` of
    resident memory (the machine is shared). Returns (completed, reason)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        t0, peak, why = time.perf_counter(), 0.0, None
        while proc.poll() is None:
            peak = max(peak, _rss_gb(proc.pid))
            if peak > max_rss_gb:
                why = f"resident memory above {max_rss_gb:.1f} GB"
            elif time.perf_counter() - t0 > timeout:
                why = f"over {timeout:.0f} s (resident memory reached {peak:.2f} GB)"
            if why:
                proc.kill()
                proc.wait()
                break
            time.sleep(0.2)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(cmd, proc.returncode, out.read(), err.read()), why


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--leaves", type=int, default=20000)
    ap.add_argument("--size", type=int, default=16, help="elements per leaf")
    ap.add_argument("--opt", default="adam", help="a gradxform.create name")
    ap.add_argument("--paths", default="plain,fused,trainer,optax")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--max-rss-gb", type=float, default=6.0, help="kill a path above this resident memory")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.leaves, args.size, args.opt)), flush=True)
        return
    print(f"{args.leaves} leaves of {args.size} float32, optimizer {args.opt}, "
          f"{os.cpu_count()} CPU cores, load {os.getloadavg()[0]:.1f}", flush=True)
    for path in [p.strip() for p in args.paths.split(",") if p.strip()]:
        if path.startswith("optax") and args.opt != "adam":
            continue
        cmd = [sys.executable, os.path.abspath(__file__), "--child", path, "--leaves", str(args.leaves),
               "--size", str(args.size), "--opt", args.opt]
        t0 = time.perf_counter()
        proc, why = _run_limited(cmd, args.timeout, args.max_rss_gb)
        wall = time.perf_counter() - t0
        if why:
            print(f"  {path:8s} killed after {wall:.0f} s: {why}", flush=True)
            continue
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode or not lines:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            print(f"  {path:8s} failed (rc {proc.returncode}, {wall:.0f} s): {' | '.join(tail)}", flush=True)
            continue
        r = json.loads(lines[-1][7:])
        extra = "  ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items() if k not in ("first_call_s", "peak_gb"))
        print(f"  {path:8s} first call {r['first_call_s']:7.1f} s   peak {r['peak_gb']:5.2f} GB   "
              f"{extra}   (process {wall:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
