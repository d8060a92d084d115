"""The Trainer's sharded optimizer state (``update_on_kvstore=True``, ZeRO-1)
against the replicated Trainer and a user's own ``jax.pmap`` loop, on N
fake CPU devices (or the real devices of a GPU machine, unchanged).

    python benchmarks/bench_zero.py                    # 4 and 8 fake CPU devices
    python benchmarks/bench_zero.py --devices 4 --rounds 9
    python benchmarks/bench_zero.py --real             # the machine's own devices (a GPU box)

Each device count runs in its own process (XLA_FLAGS must be set before JAX
starts). Model: an MLP of ``--layers`` x ``--width`` (odd width, so no
buffer divides evenly), MXNet Adam, gradients given per device (what
``trainer.grads`` returns), donated ``step``.

Contenders:
  replicated  Trainer(params, 'adam', ...): every device holds the whole state
  sharded     Trainer(params, 'adam', ..., update_on_kvstore=True)
  pmap        a user's loop: jax.pmap(concatenate the gradients into the
              fused layout, psum, then the same fused gradxform Adam, donated),
              what the Trainer ran before it left pmap

Printed per contender: the optimizer-state bytes each device stores (from
the arrays' shards), S/N + padding (the bound the sharded state must meet),
and XLA's memory analysis of the compiled step (per device: arguments,
outputs, temporaries), with the median step time over interleaved rounds.
Benchmarks are not tests: nothing here asserts.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

MIB = 2 ** 20


def child(args) -> dict:
    if not args.real:
        os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices[0]}"
        os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    import jax.numpy as jnp
    import numpy as np

    import gradxform as gx
    from gradxform.trainer import _allreduce as ar

    n = jax.device_count()
    keys = jax.random.split(jax.random.key(0), args.layers)
    params = {f"layer{i:02d}": {"kernel": jax.random.normal(k, (args.width, args.width)) * 0.01,
                                "bias": jnp.zeros((args.width,))} for i, k in enumerate(keys)}
    opt = ("adam", {"learning_rate": 1e-3, "wd": 1e-4})
    rng = np.random.RandomState(0)
    grads = jax.tree.map(lambda x: rng.randn(n, *x.shape).astype(np.float32) * 1e-3, params)
    out = {"devices": n, "platform": jax.devices()[0].platform,
           "params": int(sum(x.size for x in jax.tree.leaves(params)))}

    def state_bytes(state):
        return int(sum(x.addressable_shards[0].data.nbytes for x in jax.tree.leaves(state)
                       if isinstance(x, jax.Array)))

    contenders = {}
    for name, kw in (("replicated", {}), ("sharded", {"update_on_kvstore": True})):
        t = gx.Trainer(params, *opt, **kw)
        g = ar.shard_leading(grads)
        t.step(g, 8)
        key = next(k for k in t._programs if k[0] == "step")
        compiled = t._programs[key].lower(t._params, t._state, jax.tree.leaves(g), [], np.float32(1 / 8)).compile()
        contenders[name] = (lambda t=t, g=g: t.step(g, 8), lambda t=t: jax.block_until_ready(t._params),
                            state_bytes(t._state), compiled.memory_analysis())
        if name == "sharded":
            lengths = [m for m in jax.tree.leaves(t._zero.lengths(t._state.layout)) if m >= 0]
            out["buffers"] = len(lengths)
            out["padding_bound"] = int(sum(-(-m // n) * n - m for m in lengths) * 4)

    tx = gx.fused(gx.create(*opt[:1], **opt[1]))
    state0 = tx.init(params)
    flat0 = gx.fused.ravel(params, state0)
    stack = lambda tree: jax.tree.map(lambda x: np.broadcast_to(np.asarray(x), (n,) + np.shape(x)), tree)  # noqa: E731

    def pmap_step(p, s, g_tree):  # per-leaf gradients in, as the Trainers get them
        gb = jax.lax.psum(gx.fused.ravel(g_tree, state0), "d")
        u, s = tx.update(jax.tree.map(lambda x: x * (1 / 8), gb), s, p)
        return gx.apply_updates(p, u), s

    step = jax.pmap(pmap_step, axis_name="d", donate_argnums=(0, 1))
    holder = {"p": jax.pmap(lambda x: x)(stack(flat0)), "s": jax.pmap(lambda x: x)(stack(state0))}
    flat_g = grads

    def run_pmap():
        holder["p"], holder["s"] = step(holder["p"], holder["s"], flat_g)

    run_pmap()
    compiled = step.lower(holder["p"], holder["s"], flat_g).compile()
    contenders["pmap"] = (run_pmap, lambda: jax.block_until_ready(holder["p"]), state_bytes(holder["s"]),
                          compiled.memory_analysis())

    times = {k: [] for k in contenders}
    for _ in range(args.rounds):
        for name, (run, wait, _, _) in contenders.items():
            wait()
            t0 = time.perf_counter()
            for _ in range(args.calls):
                run()
            wait()
            times[name].append((time.perf_counter() - t0) / args.calls)
    out["rows"] = {}
    for name, (_, _, sbytes, mem) in contenders.items():
        out["rows"][name] = {"state": sbytes, "ms": 1e3 * statistics.median(times[name]),
                             "arg": getattr(mem, "argument_size_in_bytes", -1),
                             "out": getattr(mem, "output_size_in_bytes", -1),
                             "temp": getattr(mem, "temp_size_in_bytes", -1),
                             "alias": getattr(mem, "alias_size_in_bytes", -1)}
    return out


def report(res: dict) -> None:
    n = res["devices"]
    whole = res["rows"]["replicated"]["state"]
    print(f"\n{n} {res['platform']} devices, {res['params'] / 1e6:.2f} M parameters, MXNet Adam; "
          f"{res['buffers']} state buffers sharded; S = {whole / MIB:.2f} MiB per device unsharded, "
          f"ceil(S/N) + padding = {(-(-whole // n) + res['padding_bound']) / MIB:.3f} MiB "
          f"(padding {res['padding_bound']} B)")
    print("| contender | state per device | XLA arguments | outputs | of which donated (aliased) | temporaries "
          "| step (median) | vs replicated |")
    print("|---|---|---|---|---|---|---|---|")
    base = res["rows"]["replicated"]["ms"]
    for name, r in res["rows"].items():
        print(f"| {name} | {r['state'] / MIB:.3f} MiB | {r['arg'] / MIB:.2f} MiB | {r['out'] / MIB:.2f} MiB | "
              f"{r['alias'] / MIB:.2f} MiB | {r['temp'] / MIB:.2f} MiB | {r['ms']:.1f} ms | {r['ms'] / base:.2f}x |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", type=int, nargs="*", default=[4, 8])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=1001)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--real", action="store_true", help="the machine's own devices (no fake CPU devices)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    counts = [0] if args.real else args.devices
    for count in counts:
        cmd = [sys.executable, __file__, "--child", "--devices", str(count), "--layers", str(args.layers),
               "--width", str(args.width), "--rounds", str(args.rounds), "--calls", str(args.calls)]
        cmd += ["--real"] if args.real else []
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode:
            print(res.stderr[-3000:])
            continue
        report(json.loads(res.stdout.strip().splitlines()[-1]))


if __name__ == "__main__":
    main()
