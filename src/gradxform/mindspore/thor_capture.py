"""THOR's layer statistics from a model, in one forward and one backward pass.

`gradxform.mindspore.thor` needs, for each THOR layer, its inputs ``a`` and
``D``, the gradient of the loss at its outputs. MindSpore records them inside
its converted layers (``DenseThor.construct`` keeps ``x``, an
``InsertGradientOf`` hook keeps ``dout``); in JAX the forward pass hands them
over:

* ``a``: the model reports each layer's inputs to a `Tap` (Flax linen: an
  interceptor does it for every ``nn.Dense``, ``nn.Conv`` and ``nn.Embed``,
  `capture_linen`; Equinox, Flax nnx or plain JAX: the model's ``__call__``
  calls ``tap(name, inputs, outputs)`` itself).
* ``D``: the tap adds a zero *perturbation* to each layer's output; the
  gradient of the loss with respect to the perturbation is ``D``, computed by
  the same ``jax.value_and_grad`` that computes the parameters' gradient.

For a dense layer ``y = a W`` (Flax layout) the two give the parameter's
gradient back: ``grad W = sum_rows a_r^T D_r`` (tests/test_thor.py checks it
to 1e-12 in float64). A layer called twice (shared weights) is refused.

    loss, grads, stats = capture(loss_fn, params, x, y)   # loss_fn(params, x, y, *, tap)
    updates, state = opt.update(grads, state, params, layer_stats=stats)
"""
from __future__ import annotations

from typing import Callable, Sequence, cast

import jax
import jax.numpy as jnp

__all__ = ["Tap", "capture", "capture_linen", "conv_patches"]


class Tap:
    """Handed to the loss function as ``tap=``; the model calls
    ``outputs = tap(name, inputs, outputs)`` at each THOR layer, ``name``
    being the layer's parameter name as the optimizer sees it
    (``"layers/0/weight"``, ``"Dense_0/kernel"``). ``inputs`` is the layer's
    ``a`` (a conv layer: its patches, `conv_patches`; an embedding: its ids)."""

    def __init__(self, perturbations: dict | None = None):
        self._eps = perturbations
        self.inputs: dict = {}
        self.outputs: dict = {}

    def __call__(self, name: str, inputs, outputs):
        if name in self.inputs:
            raise ValueError(f"Tap: layer {name!r} was tapped twice in one pass; THOR's statistics need "
                             "one call per layer (shared weights are not supported).")
        self.inputs[name] = inputs
        self.outputs[name] = outputs
        if self._eps is None:
            return outputs
        return outputs + self._eps[name].astype(outputs.dtype)


def capture(loss_fn: Callable, params, *args, **kwargs):
    """Runs ``loss_fn(params, *args, tap=tap, **kwargs)`` (a scalar loss) once
    forward and once backward. Returns ``(loss, grads, layer_stats)`` with
    ``layer_stats = {name: {'a': inputs, 'D': d loss / d outputs}}``."""

    def outputs(p):
        tap = Tap()
        loss_fn(p, *args, tap=tap, **kwargs)
        return tap.outputs

    shapes = jax.eval_shape(outputs, params)
    if not shapes:
        raise ValueError("capture: the loss function called its tap for no layer; call "
                         "tap(name, inputs, outputs) at each THOR layer (or use capture_linen).")
    zeros = {n: jnp.zeros(s.shape, s.dtype) for n, s in shapes.items()}

    def run(p, eps):
        tap = Tap(eps)
        loss = loss_fn(p, *args, tap=tap, **kwargs)
        return loss, tap.inputs

    (loss, inputs), (grads, d) = jax.value_and_grad(run, argnums=(0, 1), has_aux=True)(params, zeros)
    return loss, grads, {n: {"a": inputs[n], "D": d[n]} for n in inputs}


def conv_patches(x, kernel_hw, strides=(1, 1), padding: str | Sequence[tuple[int, int]] = "SAME",
                 layout: str = "in_out"):
    """A 2-D convolution's input patches, one row per output position, in the
    kernel's flatten order: ``layout='in_out'`` (Flax, NHWC input, HWIO kernel)
    gives ``(N, H', W', kh*kw*C)`` ordered (kh, kw, c); ``'out_in'``
    (MindSpore/PyTorch/Equinox, NCHW input, OIHW kernel) gives
    ``(N, H', W', C*kh*kw)`` ordered (c, kh, kw). ``padding``: 'SAME',
    'VALID' or ((top, bottom), (left, right))."""
    kh, kw = kernel_hw
    spec = ("NHWC", "HWIO", "NHWC") if layout == "in_out" else ("NCHW", "OIHW", "NHWC")
    p = jax.lax.conv_general_dilated_patches(x, (kh, kw), tuple(strides), padding, dimension_numbers=spec,
                                             precision=jax.lax.Precision.HIGHEST)
    if layout == "out_in":
        return p  # features ordered (c, kh, kw), as an OIHW kernel flattens
    c = p.shape[-1] // (kh * kw)
    return p.reshape(*p.shape[:-1], c, kh, kw).transpose(0, 1, 2, 4, 5, 3).reshape(p.shape)


def capture_linen(loss_fn: Callable, params, *args, **kwargs):
    """`capture` for a Flax linen model without changing it: every
    ``nn.Dense``, ``nn.Conv`` (2-D, no dilation or groups) and ``nn.Embed``
    called inside ``loss_fn(params, *args, **kwargs)`` (which calls
    ``model.apply``) is tapped through ``flax.linen.intercept_methods``, by
    the name of its ``kernel`` / ``embedding`` in ``params`` (the
    ``'params'`` collection: ``"Dense_0/kernel"``). Returns ``(loss, grads,
    layer_stats)``; pass ``layout='in_out'`` to `thor`."""
    import flax.linen as nn  # noqa: PLC0415  (optional dependency)

    def with_tap(p, *a, tap, **k):
        def interceptor(next_fun, iargs, ikwargs, context):
            mod = context.module
            if context.method_name != "__call__" or not isinstance(mod, (nn.Dense, nn.Conv, nn.Embed)):
                return next_fun(*iargs, **ikwargs)
            x = iargs[0] if iargs else next(iter(ikwargs.values()))
            path = "/".join(mod.path)
            if isinstance(mod, nn.Embed):
                return tap(f"{path}/embedding", x, next_fun(*iargs, **ikwargs))
            if isinstance(mod, nn.Conv):
                k = mod.kernel_size  # flax takes an int (a 1-D kernel) or a sequence
                ks = (k,) if isinstance(k, int) else tuple(k)
                if len(ks) != 2 or mod.feature_group_count != 1 or any(
                        d not in (None, 1, (1, 1)) for d in (mod.kernel_dilation, mod.input_dilation)):
                    raise ValueError(f"capture_linen: {path}: only 2-D convolutions without dilation or "
                                     "feature groups are supported.")
                pad = mod.padding
                if isinstance(pad, int):
                    pad = ((pad, pad), (pad, pad))
                elif not isinstance(pad, str):
                    # flax's PaddingLike: each entry an int or a (low, high) pair
                    pad = tuple((q, q) if isinstance(q, int) else cast("tuple[int, int]", tuple(q)) for q in pad)
                if isinstance(pad, str) and pad not in ("SAME", "VALID"):
                    raise ValueError(f"capture_linen: {path}: padding {pad!r} is not supported.")
                st = mod.strides or 1
                x = conv_patches(x, ks, (st, st) if isinstance(st, int) else tuple(st), pad, "in_out")
            return tap(f"{path}/kernel", x, next_fun(*iargs, **ikwargs))

        with nn.intercept_methods(interceptor):
            return loss_fn(p, *a, **k)

    return capture(with_tap, params, *args, **kwargs)
