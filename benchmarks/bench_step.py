"""One optimizer step (AdamW), timed side by side: gradxform (fused and per-leaf),
optax, PyTorch (fused / foreach, when importable), and a hand-written fused
flat kernel, the memory-bandwidth floor every other number is divided by.

    python benchmarks/bench_step.py                 # all sets, 30 timed steps
    python benchmarks/bench_step.py --quick         # 5 timed steps, torch fused only
    python benchmarks/bench_step.py --slow          # also per-leaf gradxform on 2,000 leaves
    python benchmarks/bench_step.py --sets resnet50,tiny2000 --steps 50

Every JAX contender is one jitted step ``(params, grads, state) -> (params,
state)`` with params and state donated, timed as the median wall time of
``--steps`` samples after 2 warm-up calls; a sample is one call and its wait
on CPU, 10 calls back to back and one wait on an accelerator (``CHAIN=k``
sets it), divided by the calls.
Needs only jax and optax (torch optional); runs unchanged on CPU and GPU.
Peak memory: XLA's own accounting of the compiled step (arguments + outputs
not aliased to arguments + temporaries), and, where the backend reports it,
``device.memory_stats()``. Benchmarks are not tests: nothing here asserts.
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import gradxform  # noqa: E402
from gradxform import pieces  # noqa: E402

LR, B1, B2, EPS, WD = 1e-3, 0.9, 0.999, 1e-8, 1e-2


def calls_per_sample() -> int:
    """Calls timed back to back per sample, then one wait: 1 on CPU, where a
    step takes milliseconds; 10 on an accelerator (``CHAIN`` overrides), where
    waiting after every call would time the host's launch and sync latency
    (tens of microseconds) rather than the device's step."""
    return int(os.environ.get("CHAIN", 1 if jax.default_backend() == "cpu" else 10))


# -- parameter sets ------------------------------------------------------------

def resnet50_shapes() -> dict:
    """torchvision ResNet-50: 53 conv kernels (HWIO), 53 BatchNorm scale/bias
    pairs, fc kernel and bias: 161 leaves, 25,557,032 parameters."""
    shapes = {"conv1": (7, 7, 3, 64), "bn1/scale": (64,), "bn1/bias": (64,)}
    cin = 64
    for s, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512))):
        for b in range(blocks):
            pre = f"layer{s + 1}/{b}"
            for k, (kh, ci, co) in enumerate(((1, cin, width), (3, width, width), (1, width, 4 * width))):
                shapes[f"{pre}/conv{k + 1}"] = (kh, kh, ci, co)
                shapes[f"{pre}/bn{k + 1}/scale"] = (co,)
                shapes[f"{pre}/bn{k + 1}/bias"] = (co,)
            if b == 0:
                shapes[f"{pre}/downsample/conv"] = (1, 1, cin, 4 * width)
                shapes[f"{pre}/downsample/bn/scale"] = (4 * width,)
                shapes[f"{pre}/downsample/bn/bias"] = (4 * width,)
            cin = 4 * width
    shapes["fc/kernel"] = (2048, 1000)
    shapes["fc/bias"] = (1000,)
    return shapes


def gpt2_small_shapes() -> dict:
    """GPT-2 small (HF layout): wte, wpe, 12 blocks of 12 leaves, ln_f: 148
    leaves, 124,439,808 parameters."""
    d, f, v, n = 768, 3072, 50257, 1024
    shapes = {"wte": (v, d), "wpe": (n, d), "ln_f/g": (d,), "ln_f/b": (d,)}
    for i in range(12):
        p = f"h{i:02d}"
        shapes.update({
            f"{p}/ln_1/g": (d,), f"{p}/ln_1/b": (d,), f"{p}/attn/c_attn/w": (d, 3 * d),
            f"{p}/attn/c_attn/b": (3 * d,), f"{p}/attn/c_proj/w": (d, d), f"{p}/attn/c_proj/b": (d,),
            f"{p}/ln_2/g": (d,), f"{p}/ln_2/b": (d,), f"{p}/mlp/c_fc/w": (d, f), f"{p}/mlp/c_fc/b": (f,),
            f"{p}/mlp/c_proj/w": (f, d), f"{p}/mlp/c_proj/b": (d,)})
    return shapes


def tiny_shapes(n=2000) -> dict:
    return {f"p{i:04d}": (16,) for i in range(n)}


SETS = {"resnet50": resnet50_shapes, "gpt2": gpt2_small_shapes, "tiny2000": tiny_shapes}


def make_tree(shapes: dict, seed: int, scale: float):
    key = jax.random.key(seed)
    out = {}
    for i, (name, shape) in enumerate(shapes.items()):
        out[name] = scale * jax.random.normal(jax.random.fold_in(key, i), shape, jnp.float32)
    return out


def nbytes(tree) -> int:
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))


# -- contenders ------------------------------------------------------------------

def gradxform_adamw():
    """AdamW from gradxform pieces (MXNet-style bias correction folded into the
    step, decoupled decay ``-lr * wd * w``): the traffic of optax.adamw."""
    return gradxform.chain(pieces.track_step(LR), pieces.scale_by_adam_moments(B1, B2, EPS),
                           pieces.bias_correction(B1, B2), pieces.scale_by_lr(),
                           pieces.add_decoupled_weight_decay(WD))


def tx_step(tx, apply):
    def step(p, g, s):
        u, s = tx.update(g, s, p)
        return apply(p, u), s
    return step


def flat_kernel(p, g, s):
    """The floor: one elementwise pass over flat p, g, m, v (28 bytes/param),
    with every scalar folded first (one sqrt and one division per element)."""
    m, v, t = s
    t = t + 1
    tf = t.astype(jnp.float32)
    m = B1 * m + (1 - B1) * g
    v = B2 * v + (1 - B2) * g * g
    step_size = LR * jnp.sqrt(1 - B2 ** tf) / (1 - B1 ** tf)
    return p * (1 - LR * WD) - step_size * m / (jnp.sqrt(v) + EPS), (m, v, t)


def memory_of(compiled):
    try:
        ma = compiled.memory_analysis()
        if ma is None:
            return None
        return int(ma.argument_size_in_bytes + ma.output_size_in_bytes - ma.alias_size_in_bytes
                   + ma.temp_size_in_bytes)
    except Exception:  # noqa: BLE001  (not every backend reports it)
        return None


def device_peak():
    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:  # noqa: BLE001
        return None
    return None if not stats else stats.get("peak_bytes_in_use")


def time_jax(step, p, g, s, steps, warmup=2):
    """(median seconds, compile seconds, XLA peak bytes, device peak bytes)."""
    jitted = jax.jit(step, donate_argnums=(0, 2))
    t0 = time.perf_counter()
    compiled = jitted.lower(p, g, s).compile()
    compile_s = time.perf_counter() - t0
    mem = memory_of(compiled)
    for _ in range(warmup):
        p, s = compiled(p, g, s)
        jax.block_until_ready((p, s))
    times, chain = [], calls_per_sample()
    for _ in range(steps):
        t0 = time.perf_counter()
        for _ in range(chain):
            p, s = compiled(p, g, s)
        jax.block_until_ready((p, s))
        times.append((time.perf_counter() - t0) / chain)
    peak = device_peak()
    del p, s
    return statistics.median(times), compile_s, mem, peak


def time_torch(shapes, params_np, grads_np, steps, impl, warmup=2):
    import torch  # noqa: PLC0415
    dev = "cuda" if (jax.default_backend() == "gpu" and torch.cuda.is_available()) else "cpu"
    ps = []
    for name in shapes:
        t = torch.from_numpy(np.array(params_np[name])).to(dev).requires_grad_(True)
        t.grad = torch.from_numpy(np.array(grads_np[name])).to(dev)
        ps.append(t)
    kw = {"fused": True} if impl == "fused" else {"foreach": True}
    try:
        opt = torch.optim.AdamW(ps, lr=LR, betas=(B1, B2), eps=EPS, weight_decay=WD, **kw)
        opt.step()
    except (RuntimeError, TypeError) as err:
        return None, f"{err}".splitlines()[0][:60]
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    for _ in range(warmup):
        opt.step()
    sync()
    times, chain = [], calls_per_sample()
    for _ in range(steps):
        t0 = time.perf_counter()
        for _ in range(chain):
            opt.step()
        sync()
        times.append((time.perf_counter() - t0) / chain)
    return statistics.median(times), None


def run_set(name, steps, use_torch, quick=False, slow=False):
    shapes = SETS[name]()
    n = sum(int(np.prod(s)) for s in shapes.values())
    print(f"\n== {name}: {len(shapes)} leaves, {n / 1e6:.2f} M params "
          f"({jax.default_backend()}, {jax.devices()[0].device_kind})", flush=True)
    params = make_tree(shapes, 0, 0.05)
    grads = make_tree(shapes, 1, 1e-3)
    results = []  # (label, median, compile, mem, peak, note)
    ideal = 3 * n * 4 + n * 4  # p, g, m, v in float32

    # the floor: one flat buffer each
    fp = jnp.concatenate([x.reshape(-1) for x in jax.tree.leaves(params)])
    fg = jnp.concatenate([x.reshape(-1) for x in jax.tree.leaves(grads)])
    s = (jnp.zeros_like(fp), jnp.zeros_like(fp), jnp.zeros((), jnp.int32))
    results.append(("flat kernel (floor)",) + time_jax(flat_kernel, fp, fg, s, steps) + ("",))
    del fp, fg, s
    gc.collect()

    def copy(t):
        return jax.tree.map(jnp.copy, t)

    otx = optax.adamw(LR, B1, B2, EPS, weight_decay=WD)
    results.append(("optax.adamw (per-leaf)",) + time_jax(
        tx_step(otx, optax.apply_updates), copy(params), grads, otx.init(params), steps) + ("",))
    gc.collect()

    gtx = gradxform_adamw()
    many = len(shapes) > 500 and not slow  # XLA CPU compiles these for minutes on 2 cores
    if many:
        results.append(("gradxform per-leaf", None, None, None, None, "skipped: --slow (compiles for minutes)"))
    else:
        results.append(("gradxform per-leaf",) + time_jax(
            tx_step(gtx, gradxform.apply_updates), copy(params), grads, gtx.init(params), steps) + ("",))
    gc.collect()

    # the least any step fed an ordinary tree costs: one elementwise op per
    # leaf (p - lr * g), no state; per-leaf buffers in and out of the call
    def sgd_step(p, g, s):
        return jax.tree.map(lambda a, b: a - LR * b, p, g), s
    results.append(("tree in/out floor (p - lr*g)",) + time_jax(sgd_step, copy(params), grads, (), steps) + ("",))
    gc.collect()

    # what Flax/Equinox users hold: the transformation itself, fed ordinary trees
    ptx = gradxform.create("adam", learning_rate=LR, beta1=B1, beta2=B2, epsilon=EPS, wd=WD)
    if many:
        results.append(("create('adam') per leaf", None, None, None, None, "skipped: --slow (compiles for minutes)"))
    else:
        results.append(("create('adam') per leaf",) + time_jax(
            tx_step(ptx, gradxform.apply_updates), copy(params), grads, jax.jit(ptx.init)(params), steps) + ("",))
    gc.collect()

    # the same with small leaves packed inside the step (gradxform.fused.packed)
    ctx = gradxform.fused.packed(gradxform.create("adam", learning_rate=LR, beta1=B1, beta2=B2,
                                                  epsilon=EPS, wd=WD),
                                 max_leaf_size=int(os.environ.get("PACK_MAX", 1 << 16)))
    if many:
        results.append(("packed(create('adam'))", None, None, None, None,
                        "skipped: --slow (output slices compile for minutes)"))
    else:
        t0 = time.perf_counter()
        cstate = jax.jit(ctx.init)(params)
        jax.block_until_ready(cstate)
        cinit_s = time.perf_counter() - t0
        results.append(("packed(create('adam'))",) + time_jax(
            tx_step(ctx, gradxform.apply_updates), copy(params), grads, cstate, steps) + (
            f"jit(init) {cinit_s:.1f} s",))
        del cstate
    gc.collect()

    ftx = gradxform.fused(gtx, strict=True)
    t0 = time.perf_counter()
    fstate = ftx.init(params)
    jax.block_until_ready(fstate)
    init_s = time.perf_counter() - t0
    if many:
        results.append(("gradxform fused, tree in/out", None, None, None, None,
                        "skipped: --slow (2,000 output slices compile for minutes)"))
    else:
        try:
            results.append(("gradxform fused, tree in/out",) + time_jax(
                tx_step(ftx, gradxform.apply_updates), copy(params), grads, fstate, steps) + ("",))
        except ValueError as e:  # a layout packing large leaves refuses trees (gradxform._fused.TREE_PACK_LIMIT)
            results.append(("gradxform fused, tree in/out", None, None, None, None, f"refused: {str(e)[:60]}..."))
    gc.collect()
    flat_p = gradxform.fused.ravel(params, fstate)
    flat_g = gradxform.fused.ravel(grads, fstate)
    results.append(("gradxform fused, FlatTree",) + time_jax(
        tx_step(ftx, gradxform.apply_updates), flat_p, flat_g, ftx.init(params), steps) + (
        f"{len(flat_p.buffers)} buffer(s); fused init {init_s * 1e3:.0f} ms",))
    del flat_p, flat_g, fstate
    gc.collect()
    # the Trainer's default layout: leaves above 2**16 elements keep their own buffer
    ttx = gradxform.fused(gtx, strict=True, max_leaf_size=1 << 16)
    tstate = ttx.init(params)
    flat_p, flat_g = gradxform.fused.ravel(params, tstate), gradxform.fused.ravel(grads, tstate)
    results.append(("gradxform fused, Trainer layout",) + time_jax(
        tx_step(ttx, gradxform.apply_updates), flat_p, flat_g, tstate, steps) + (
        f"{len(flat_p.buffers)} buffer(s): leaves > 2**16 alone",))
    del flat_p, flat_g, tstate
    gc.collect()

    if use_torch:
        try:
            import torch  # noqa: F401, PLC0415
            have_torch = True
        except ImportError:
            have_torch = False
            print("   (torch not importable: skipped)")
        if have_torch:
            pn, gn = jax.device_get(params), jax.device_get(grads)
            for impl in ("fused",) if quick else ("fused", "foreach"):
                med, err = time_torch(shapes, pn, gn, steps, impl)
                results.append((f"torch AdamW {impl}", med, None, None, None, err or ""))
                gc.collect()
            del pn, gn

    floor = results[0][1]
    print(f"   {'contender':32s} {'median ms':>10s} {'/floor':>7s} {'compile s':>9s} "
          f"{'XLA peak MB':>11s} {'/ideal':>6s} {'dev peak MB':>11s}  note")
    for label, med, comp, mem, peak, note in results:
        if med is None:
            print(f"   {label:32s} {'n/a':>10s} {'':>7s} {'':>9s} {'':>11s} {'':>6s} {'':>11s}  {note}")
            continue
        print(f"   {label:32s} {med * 1e3:10.3f} {med / floor:6.2f}x "
              f"{'' if comp is None else f'{comp:9.2f}':>9s} "
              f"{'' if mem is None else f'{mem / 2**20:11.1f}':>11s} "
              f"{'' if mem is None else f'{mem / ideal:5.2f}x':>6s} "
              f"{'' if peak is None else f'{peak / 2**20:11.1f}':>11s}  {note}", flush=True)
    print(f"   ideal (params + grads + m + v) = {ideal / 2**20:.1f} MB", flush=True)
    del params, grads
    gc.collect()
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="resnet50,gpt2,tiny2000",
                    help="comma-separated: " + ", ".join(SETS))
    ap.add_argument("--steps", type=int, default=30, help="timed steps per contender (median)")
    ap.add_argument("--quick", action="store_true", help="5 timed steps, torch fused only")
    ap.add_argument("--slow", action="store_true",
                    help="also time contenders that compile for minutes on the 2,000-leaf set")
    ap.add_argument("--no-torch", action="store_true", help="skip PyTorch even when importable")
    args = ap.parse_args(argv)
    steps = 5 if args.quick else args.steps
    names = [s.strip() for s in args.sets.split(",") if s.strip()]
    for s in names:
        if s not in SETS:
            ap.error(f"--sets: unknown set {s!r}; known: {', '.join(SETS)}")
    print(f"jax {jax.__version__}, optax {optax.__version__}, backend {jax.default_backend()}, "
          f"{os.cpu_count()} CPU cores, {steps} timed steps")
    for s in names:
        run_set(s, steps, not args.no_torch, args.quick, args.slow)


if __name__ == "__main__":
    main()
