"""gradxform.paddle.lr: Paddle 3.3.1's scheduler objects, against goldens recorded from
Paddle (tools/paddle_lr_goldens.py -> tests/goldens/paddle/lr_schedulers.npz) and against
float64 transcriptions of ``paddle/optimizer/lr.py`` written here (never calling gradxform).

Tolerances: the schedulers compute in Python float64 as Paddle's, the closed forms through
NumPy (``np.cos`` where Paddle calls ``math.cos``): rtol 1e-12, atol 1e-15 (values cross 0).
End to end, the optimizer reads the value as a float32 hyperparameter as Paddle's float32
learning-rate tensor: parameters rtol 1e-6, atol 1e-7 (float32 arithmetic).
"""
import inspect
import json
import math
import os
import warnings

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform
from gradxform import schedules as S
from gradxform.mxnet import get_updater
from gradxform.paddle import lr as LR
from gradxform.paddle import regularizer

Z = np.load(os.path.join(os.path.dirname(__file__), "goldens", "paddle", "lr_schedulers.npz"))
META = json.loads(str(Z["meta"]))
CASES = META["cases"]
METRICS = list(Z["metrics"])
TOL = dict(rtol=1e-12, atol=1e-15)


def namespace():
    """gradxform.paddle.lr's names plus the recorded user code (subclasses, lambdas), exec'd
    here exactly as the generator exec'd it against paddle.optimizer.lr."""
    ns = {name: getattr(LR, name) for name in LR.__all__}
    ns["math"] = math
    exec(META["helpers"], ns)  # noqa: S102 (our own recorded source)
    return ns


def advance(s, t, metrics):
    if metrics:
        s.step(METRICS[t])
    else:
        s.step()


def run(key):
    """(41 values, 41 values through a state_dict round trip after 20 steps, mid state_dict, end one)."""
    ns, case = namespace(), CASES[key]
    s = eval(case["expr"], ns)  # noqa: S307
    vals, rt = [s()], [s()]
    for t in range(40):
        advance(s, t, case["metrics"])
        vals.append(s())
        if t < 20:
            rt.append(s())
            if t == 19:
                mid = s.state_dict()
                fresh = eval(case["expr"], ns)  # noqa: S307
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # LinearWarmup's nested dict: Paddle's "unused values" warning
                    fresh.set_state_dict(dict(mid))
        else:
            advance(fresh, t, case["metrics"])
            rt.append(fresh())
    return np.array(vals), np.array(rt), mid, s.state_dict()


# -- float64 transcriptions of paddle/optimizer/lr.py (values at last_epoch t) -----------------------
def closed(f, start=0):
    return [f(t) for t in range(start, start + 41)]


def recursive(first, nxt, start=0):
    out = [first(start)]
    for t in range(start + 1, start + 41):
        out.append(nxt(t, out[-1]))
    return out


def cos_rec(base, T, eta):
    def nxt(t, last):
        if t == 0:
            return base
        if (t - 1 - T) % (2 * T) == 0:
            return last + (base - eta) * (1 - math.cos(math.pi / T)) / 2
        return (1 + math.cos(math.pi * t / T)) / (1 + math.cos(math.pi * (t - 1) / T)) * (last - eta) + eta
    return nxt


def cos_closed(base, T, eta, t):
    return eta + (base - eta) * (1 + math.cos(math.pi * t / T)) / 2


def one_cycle_ref(max_lr, total, div, end, pct, strategy, three):
    init = max_lr / div
    if three:
        ends = [pct * total - 1, 2 * pct * total - 2, total - 1]
        lrs = [init, max_lr, init, end]
    else:
        ends = [pct * total - 1, total - 1]
        lrs = [init, max_lr, end]
    starts = [0] + ends[:-1]

    def f(t):
        i = next((k for k, e in enumerate(ends) if t <= e), len(ends) - 1)
        p = (t - starts[i]) / (ends[i] - starts[i])
        a, b = lrs[i], lrs[i + 1]
        return b + (a - b) / 2.0 * (math.cos(math.pi * p) + 1) if strategy == "cos" else (b - a) * p + a
    return f


def cyclic_ref(base, mx, up, down, scale, by_cycle):
    size = up + down

    def f(t):
        cycle = 1 + t // size
        pct = 1.0 + t / size - cycle
        h = pct / (up / size) if pct <= up / size else (1 - pct) / (1 - up / size)
        return base + (mx - base) * h * scale(cycle if by_cycle else t)
    return f


def plateau_ref(lr, mode, factor, patience, threshold, tmode, cooldown, min_lr, eps=1e-8):
    out, best, bad, cool = [lr], None, 0, 0
    for m in METRICS:
        if cool > 0:
            cool -= 1
        else:
            if mode == "min":
                better = best is None or m < (best - best * threshold if tmode == "rel" else best - threshold)
            else:
                better = best is None or m > (best + best * threshold if tmode == "rel" else best + threshold)
            best, bad = (m, 0) if better else (best, bad + 1)
            if bad > patience:
                cool, bad = cooldown, 0
                new = max(lr * factor, min_lr)
                lr = new if lr - new > eps else lr
        out.append(lr)
    return out


def restarts_ref(base, t0, mult, eta, steps=40, t_cur=0, t_i=None):
    t_i = t_i or t0
    out = [cos_closed(base, t_i, eta, t_cur)]
    for _ in range(steps):
        t_cur += 1
        if t_cur >= t_i:
            t_cur, t_i = t_cur - t_i, t_i * mult
        out.append(cos_closed(base, t_i, eta, t_cur))
    return out


def linear_lr_ref(base, total, s, e):
    def nxt(t, last):
        if t > total:
            return last
        return last * (1.0 + (e - s) / (total * s + (t - 1) * (e - s)))
    return recursive(lambda t: base * s, nxt)


def linear_lr_resumed():
    """LinearLR(0.5, 15, 0.25, 0.75, last_epoch=3): Paddle's first step (t = 4) multiplies
    its last_lr, which is still base_lr, then recurses as usual."""
    last, out = 0.5, []
    for t in range(4, 45):
        last = last if t > 15 else last * (1.0 + 0.5 / (15 * 0.25 + (t - 1) * 0.5))
        out.append(last)
    return out


def product(base, f, t):
    for e in range(1, t + 1):
        base *= f(e)
    return base


def nlp(t):
    return 5e-5 * (t / 3 if t < 3 else max(0.0, (36 - t) / 33))


REF = {
    "NoamDecay": closed(lambda t: 2.0 * 64 ** -0.5 * min(1 if t == 0 else t ** -0.5, 10 ** -1.5 * t)),
    "PiecewiseDecay": closed(lambda t: 0.5 if t < 4 else 0.2 if t < 9 else 0.05 if t < 20 else 0.01),
    "NaturalExpDecay": closed(lambda t: 0.5 * math.exp(-0.1 * t)),
    "InverseTimeDecay": closed(lambda t: 0.5 / (1 + 0.2 * t)),
    "PolynomialDecay": closed(lambda t: 0.49 * (1 - min(t, 12) / 12) ** 2 + 0.01),
    "PolynomialDecay_cycle": closed(lambda t: 0.49 * (1 - t / (12 * max(1, math.ceil(t / 12)))) ** 2 + 0.01),
    "LinearWarmup_float": closed(lambda t: 0.5 * t / 8 if t < 8 else 0.5),
    "LinearWarmup_cosine": closed(lambda t: 0.45 * t / 6 + 0.05 if t < 6 else cos_closed(0.5, 15, 0.01, t - 6)),
    "LinearWarmup_step": closed(lambda t: 0.4 * t / 5 if t < 5 else 0.4 * 0.5 ** ((t - 5) // 4)),
    "ExponentialDecay": closed(lambda t: 0.5 * 0.9 ** t),
    "MultiStepDecay": closed(lambda t: 0.5 * 0.3 ** sum(t >= m for m in (3, 10, 25))),
    "StepDecay": closed(lambda t: 0.5 * 0.5 ** (t // 5)),
    "StepDecay_resumed": closed(lambda t: 0.5 * 0.5 ** (t // 5), start=8),
    "LambdaDecay": closed(lambda t: 0.5 * 0.95 ** t),
    "LambdaDecay_nlp": closed(nlp),
    "Subclass_get_lr": closed(lambda t: 0.3 * (t + 1) / 5 if t < 5 else max(1e-3, 0.3 * (1 - (t - 5) / 25) ** 2)),
    "Subclass_state_keys": closed(lambda t: 0.4 * 0.5 ** (t // 6)),
    "ReduceOnPlateau_min_rel": plateau_ref(0.5, "min", 0.5, 2, 0.001, "rel", 1, 0.02),
    "ReduceOnPlateau_max_abs": plateau_ref(0.5, "max", 0.3, 3, 0.01, "abs", 0, 0),
    "ReduceOnPlateau_eps": plateau_ref(0.01, "min", 0.5, 0, 1e-4, "rel", 2, 0.004, 0.003),
    "CosineAnnealingDecay": recursive(lambda t: 0.5, cos_rec(0.5, 10, 0.01)),
    # resumed at last_epoch=4: Paddle's recursion starts from last_lr = base_lr at t = 5
    "CosineAnnealingDecay_resumed": recursive(lambda t: cos_rec(0.5, 10, 0.01)(5, 0.5), cos_rec(0.5, 10, 0.01), 5),
    "MultiplicativeDecay": closed(lambda t: product(0.5, lambda e: 0.8 if e % 3 == 0 else 0.97, t)),
    "OneCycleLR_cos": closed(one_cycle_ref(0.5, 40, 25.0, 1e-4, 0.3, "cos", False)),
    "OneCycleLR_linear_3phase": closed(one_cycle_ref(0.5, 50, 10.0, 0.001, 0.25, "linear", True)),
    "CyclicLR_triangular": closed(cyclic_ref(0.1, 0.5, 6.0, 4.0, lambda x: 1.0, True)),
    "CyclicLR_triangular2": closed(cyclic_ref(0.1, 0.5, 5.0, 5.0, lambda x: 1 / (2.0 ** (x - 1)), True)),
    "CyclicLR_exp_range": closed(cyclic_ref(0.1, 0.5, 5.0, 5.0, lambda x: 0.95 ** x, False)),
    "CyclicLR_scale_fn": closed(cyclic_ref(0.05, 0.3, 3.0, 5.0, lambda x: 1.0 / (1.0 + 0.05 * x), False)),
    "LinearLR": linear_lr_ref(0.5, 15, 0.2, 1.0),
    "LinearLR_resumed": linear_lr_resumed(),
    "CosineAnnealingWarmRestarts": restarts_ref(0.5, 5, 2, 0.01),
    "CosineAnnealingWarmRestarts_mult1": restarts_ref(0.5, 7, 1, 0.0),
}


def test_every_class_and_option_is_recorded():
    kinds = {c["expr"].split("(")[0] for c in CASES.values()}
    assert set(LR.__all__) - {"LRScheduler"} <= kinds | {"LRScheduler"}
    assert {"LinearDecayWithWarmup", "WarmupPoly", "KeepsState"} <= kinds  # user subclasses
    assert META["framework_version"].startswith("3.3")


@pytest.mark.parametrize("key", sorted(CASES))
def test_values_and_state_dict_round_trip_equal_paddle(key):
    vals, rt, mid, end = run(key)
    np.testing.assert_allclose(vals, Z["v_" + key], **TOL)
    np.testing.assert_allclose(rt, Z["rt_" + key], **TOL)
    for got, want in ((mid, CASES[key]["state_dict_mid"]), (end, CASES[key]["state_dict_end"])):
        assert sorted(got) == sorted(want)
        for k in want:
            if isinstance(want[k], dict):
                assert {a: pytest.approx(b, rel=1e-12) for a, b in want[k].items()} == got[k]
            else:
                assert got[k] == pytest.approx(want[k], rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("key", sorted(REF))
def test_transcription_equals_paddle_golden(key):
    """The independent float64 transcription agrees with what Paddle recorded (so the two
    together pin gradxform from both sides)."""
    np.testing.assert_allclose(REF[key], Z["v_" + key], **TOL)


# Edges off the recorded cases (issue 28 mutants of gradxform/schedules/_paddle.py): each
# expression's float64 transcription of paddle/optimizer/lr.py (Paddle 3.3.1, `get_lr`, line
# numbers there); the same expressions were run in Paddle 3.3.1 by hand and agree to 1e-12.
EDGES = {
    # 1217-1221: no milestone: base * gamma ** len([]), the base throughout
    "MultiStepDecay(0.5, [], 0.3)": lambda t: 0.5,
    # 393-399: one warmup step: min(t ** -0.5, t) peaks at exactly 1 at t = 1
    "NoamDecay(16, 1, 2.0)": lambda t: 2.0 * 16 ** -0.5 * min(1 if t == 0 else t ** -0.5, 1 ** -1.5 * t),
    # 992-1001: `last_epoch < warmup_steps` warms; from warmup_steps on, learning_rate (here not end_lr)
    "LinearWarmup(0.1, 4, 0.0, 0.5)": lambda t: 0.5 * t / 4 if t < 4 else 0.1,
}


@pytest.mark.parametrize("expr", sorted(EDGES))
def test_edges_equal_the_transcription_host_and_jit(expr):
    ref = np.array([EDGES[expr](t) for t in range(12)])
    host = eval(expr, {n: getattr(LR, n) for n in LR.__all__})  # noqa: S307 (the table above)
    vals = [host()]
    for _ in range(11):
        host.step()
        vals.append(host())
    np.testing.assert_allclose(vals, ref, **TOL)
    sched = eval(expr, {n: getattr(S, "Paddle" + n) for n in LR.__all__ if hasattr(S, "Paddle" + n)})  # noqa: S307
    np.testing.assert_allclose(jax.jit(sched)(jnp.arange(12)), ref, rtol=5e-6, atol=1e-9)  # float32


def test_one_cycle_boundary_step_stays_in_the_ending_phase_exactly_as_paddle():
    """lr.py 2118 (`if current_step <= end_step`): at t = 23, the end of the second phase of the
    recorded three-phase case, Paddle anneals phase 2 to its end, (0.05 - 0.5) * 1.0 + 0.5 =
    0.04999999999999999, not phase 3 at its start (0.05): the recorded double, bit for bit."""
    key = "OneCycleLR_linear_3phase"
    s = eval(CASES[key]["expr"], namespace())  # noqa: S307
    for _ in range(23):
        s.step()
    assert s() == Z["v_" + key][23] == (0.05 - 0.5) * 1.0 + 0.5 != 0.05


def test_cyclic_peak_of_a_cycle_that_is_nearly_all_rise_float32():
    """lr.py 2224-2229 (`if pct_per_cycle <= self.step_up_pct`): at the peak t = step_size_up,
    CyclicLR(0.001, 0.5, 1000, 1) has float32 pct == float32(1000 / 1001) exactly, and the rising
    branch gives factor 1 (x / x). The falling branch there, (1 - pct) / float32(1 / 1001), is 2.7e-5
    off 1 (1 - float32(sup) is not float32(1 - sup) so near 1), beyond the float32 path's rtol 5e-6.
    The float64 transcription (`cyclic_ref`); Paddle 3.3.1 by hand at t = 999, 1000, 1001:
    [0.49950099999999986, 0.49999999999999994, 0.001], the transcription's numbers exactly."""
    ref = cyclic_ref(0.001, 0.5, 1000.0, 1.0, lambda x: 1.0, True)
    t = np.arange(999, 1002)
    got = jax.jit(S.PaddleCyclicLR(0.001, 0.5, 1000, 1))(jnp.asarray(t))
    np.testing.assert_allclose(got, [ref(int(k)) for k in t], rtol=5e-6, atol=1e-9)  # float32


def test_warm_restarts_state_dict_keeps_only_last_epoch_and_last_lr_as_paddle():
    """Paddle saves last_epoch and last_lr only: a fresh object restored midway restarts its cosine."""
    want = restarts_ref(0.5, 5, 2, 0.01, steps=20)
    fresh = restarts_ref(0.5, 5, 2, 0.01, steps=20)  # T_cur = 0, T_i = T_0 in the fresh object
    np.testing.assert_allclose(Z["rt_CosineAnnealingWarmRestarts"][:21], want, **TOL)
    np.testing.assert_allclose(Z["rt_CosineAnnealingWarmRestarts"][21:], fresh[1:], **TOL)
    _, rt, _, _ = run("CosineAnnealingWarmRestarts")
    np.testing.assert_allclose(rt[21:], fresh[1:], **TOL)


@pytest.mark.parametrize("key", META["epoch_cases"])
def test_step_with_an_epoch_equals_paddle(key):
    s = eval(CASES[key]["expr"], namespace())  # noqa: S307
    got = []
    for e in META["epochs"]:
        s.step(epoch=e)
        got.append(s())
    np.testing.assert_allclose(got, Z["ep_" + key], **TOL)


PADDLE_SIGNATURES = {  # inspect.signature of paddle.optimizer.lr 3.3.1, annotations dropped
    "LRScheduler": "(learning_rate=0.1, last_epoch=-1, verbose=False)",
    "NoamDecay": "(d_model, warmup_steps, learning_rate=1.0, last_epoch=-1, verbose=False)",
    "PiecewiseDecay": "(boundaries, values, last_epoch=-1, verbose=False)",
    "NaturalExpDecay": "(learning_rate, gamma, last_epoch=-1, verbose=False)",
    "InverseTimeDecay": "(learning_rate, gamma, last_epoch=-1, verbose=False)",
    "PolynomialDecay": "(learning_rate, decay_steps, end_lr=0.0001, power=1.0, cycle=False, last_epoch=-1, "
                       "verbose=False)",
    "LinearWarmup": "(learning_rate, warmup_steps, start_lr, end_lr, last_epoch=-1, verbose=False)",
    "ExponentialDecay": "(learning_rate, gamma, last_epoch=-1, verbose=False)",
    "MultiStepDecay": "(learning_rate, milestones, gamma=0.1, last_epoch=-1, verbose=False)",
    "StepDecay": "(learning_rate, step_size, gamma=0.1, last_epoch=-1, verbose=False)",
    "LambdaDecay": "(learning_rate, lr_lambda, last_epoch=-1, verbose=False)",
    "ReduceOnPlateau": "(learning_rate, mode='min', factor=0.1, patience=10, threshold=0.0001, threshold_mode='rel', "
                       "cooldown=0, min_lr=0, epsilon=1e-08, verbose=False)",
    "CosineAnnealingDecay": "(learning_rate, T_max, eta_min=0, last_epoch=-1, verbose=False)",
    "MultiplicativeDecay": "(learning_rate, lr_lambda, last_epoch=-1, verbose=False)",
    "OneCycleLR": "(max_learning_rate, total_steps, divide_factor=25.0, end_learning_rate=0.0001, phase_pct=0.3, "
                  "anneal_strategy='cos', three_phase=False, last_epoch=-1, verbose=False)",
    "CyclicLR": "(base_learning_rate, max_learning_rate, step_size_up, step_size_down=None, mode='triangular', "
                "exp_gamma=1.0, scale_fn=None, scale_mode='cycle', last_epoch=-1, verbose=False)",
    "LinearLR": "(learning_rate, total_steps, start_factor=0.3333333333333333, end_factor=1.0, last_epoch=-1, "
                "verbose=False)",
    "CosineAnnealingWarmRestarts": "(learning_rate, T_0, T_mult=1, eta_min=0, last_epoch=-1, verbose=False)",
}


def _plain(sig):
    return str(sig.replace(parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()],
                           return_annotation=sig.empty))


def test_surface_is_paddles():
    assert list(LR.__all__) == list(PADDLE_SIGNATURES)
    for name, want in PADDLE_SIGNATURES.items():
        cls = getattr(LR, name)
        assert _plain(inspect.signature(cls)) == want, name
        for m in ("__call__", "get_lr", "set_state_dict", "set_dict", "state_dict", "state_keys", "step"):
            assert callable(getattr(cls, m)), (name, m)
    s = LR.StepDecay(0.5, 5)
    assert (s.base_lr, s.last_lr, s.last_epoch) == (0.5, 0.5, 0)
    assert _plain(inspect.signature(s.step)) == "(epoch=None)"
    assert _plain(inspect.signature(LR.ReduceOnPlateau(0.1).step)) == "(metrics, epoch=None)"
    assert regularizer.L2Decay is gradxform.paddle.L2Decay and regularizer.L1Decay is gradxform.paddle.L1Decay
    assert _plain(inspect.signature(regularizer.L1Decay)) == _plain(inspect.signature(regularizer.L2Decay)) \
        == "(coeff=0.0)"


def test_base_class_and_arguments_fail_as_paddle():
    with pytest.raises(NotImplementedError):
        LR.LRScheduler(0.2)  # Paddle's __init__ steps, and get_lr is the subclass's
    with pytest.raises(TypeError, match="learning rate must be float"):
        LR.StepDecay("0.1", 3)
    with pytest.raises(ValueError, match="invalid learning rate"):
        LR.ExponentialDecay(-0.1, 0.5)
    with pytest.raises(TypeError, match="step_size"):
        LR.StepDecay(0.1, 2.5)
    with pytest.raises(ValueError, match="end_lr"):
        LR.LinearWarmup(0.1, 5, 0.2, 0.1)
    with pytest.raises(ValueError, match="Tried to step 6 times"):
        s = LR.OneCycleLR(0.1, 5)
        for _ in range(6):
            s.step()
    with pytest.raises(RuntimeError, match="last_lr"):
        LR.StepDecay(0.1, 3).set_state_dict({"last_epoch": 2})
    with pytest.raises(ValueError, match="size of metrics must be 1"):
        LR.ReduceOnPlateau(0.1).step(np.ones(2))


def test_verbose_prints_as_paddle(capsys):
    s = LR.StepDecay(0.5, 1, gamma=0.5, verbose=True)
    s.step()
    assert capsys.readouterr().out.splitlines() == ["Epoch 0: StepDecay set learning rate to 0.5.",
                                                    "Epoch 1: StepDecay set learning rate to 0.25."]
    p = LR.ReduceOnPlateau(0.5, patience=0, verbose=True)
    p.step(1.0)
    p.step(2.0)  # only a reduction prints
    assert capsys.readouterr().out.splitlines() == ["Epoch 2: ReduceOnPlateau set learning rate to 0.05."]


# -- end to end: the optimizer reads scheduler() at each update ---------------------------------------
E2E = META["e2e"]
W0 = [Z[f"e2e_w0_{i}"] for i in range(len(META["e2e_shapes"]))]
GRADS = [[Z[f"e2e_g{t}_{i}"] for i in range(len(W0))] for t in range(12)]
E2E_TOL = dict(rtol=1e-6, atol=1e-7)
OPTS = {"momentum_per_batch": ("paddle.momentum", dict(momentum=0.9, weight_decay=0.01)),
        "sgd_per_epoch": ("paddle.sgd", {})}


def _want(case, t):
    return [Z[f"e2e_{case}_w{t}_{i}"] for i in range(len(W0))]


def _sched(case):
    return eval(E2E[case]["sched"], namespace())  # noqa: S307


def _params():
    return {f"p{i}": jnp.asarray(w) for i, w in enumerate(W0)}


@pytest.mark.parametrize("case", sorted(E2E))
def test_own_jitted_step_equals_paddle_without_recompiling(case):
    name, kw = OPTS[case]
    sched = _sched(case)
    opt = gradxform.create(name, learning_rate=sched, **kw)
    params = _params()
    state = opt.init(params)
    chex.clear_trace_counter()  # the counter is keyed by the code of train_step, shared by the parameters

    @jax.jit
    @chex.assert_max_traces(n=1)  # a new rate is a new hyperparameter value, never a new trace
    def train_step(params, state, grads):
        updates, state = opt.update(grads, state, params)
        return gradxform.apply_updates(params, updates), state

    logged = []
    for t in range(12):  # as Paddle's script: no call between the scheduler's step and the update
        params, state = train_step(params, state, {f"p{i}": jnp.asarray(g) for i, g in enumerate(GRADS[t])})
        logged.append(opt.get_lr(state))  # Paddle's optimizer.get_lr(): what the scheduler holds now
        if (t + 1) % E2E[case]["every"] == 0:
            sched.step()
        for i in range(len(W0)):
            np.testing.assert_allclose(params[f"p{i}"], _want(case, t)[i], **E2E_TOL, err_msg=f"update {t}")
    np.testing.assert_allclose(logged, Z[f"e2e_{case}_lr"], **TOL)
    assert len(set(logged)) >= 3 and train_step._cache_size() == 1  # the rate changed; one compilation


@pytest.mark.parametrize("case", sorted(E2E))
def test_trainer_reads_the_scheduler_before_each_update(case):
    name, kw = OPTS[case]
    sched = _sched(case)
    trainer = gradxform.Trainer(_params(), name, dict(kw, learning_rate=sched), devices=jax.devices()[:1])
    for t in range(12):
        trainer.update({f"p{i}": jnp.asarray(g) for i, g in enumerate(GRADS[t])}, 1)
        if (t + 1) % E2E[case]["every"] == 0:
            sched.step()
        got = trainer.params
        for i in range(len(W0)):
            np.testing.assert_allclose(got[f"p{i}"], _want(case, t)[i], **E2E_TOL, err_msg=f"update {t}")


@pytest.mark.parametrize("case", sorted(E2E))
def test_trainer_given_a_built_optimizer_reads_its_scheduler(case):
    name, kw = OPTS[case]
    sched = _sched(case)
    tx = gradxform.create(name, **dict(kw, learning_rate=sched))  # built first, then handed over
    trainer = gradxform.Trainer(_params(), tx, devices=jax.devices()[:1])
    for t in range(12):
        trainer.update({f"p{i}": jnp.asarray(g) for i, g in enumerate(GRADS[t])}, 1)
        if (t + 1) % E2E[case]["every"] == 0:
            sched.step()
        for i in range(len(W0)):
            np.testing.assert_allclose(trainer.params[f"p{i}"], _want(case, t)[i], **E2E_TOL, err_msg=f"update {t}")


@pytest.mark.parametrize("case", sorted(E2E))
def test_get_updater_reads_the_scheduler_before_each_update(case):
    name, kw = OPTS[case]
    sched = _sched(case)
    updater = get_updater(name, dict(kw, learning_rate=sched))
    weights = [np.array(w) for w in W0]
    for t in range(12):
        for i, g in enumerate(GRADS[t]):
            updater(i, g, weights[i])  # NumPy weights: updated in place, as MXNet's NDArrays
        if (t + 1) % E2E[case]["every"] == 0:
            sched.step()
        for i in range(len(W0)):
            np.testing.assert_allclose(weights[i], _want(case, t)[i], **E2E_TOL, err_msg=f"update {t}")


def test_set_lr_refused_and_sync_lr_kept_for_older_loops():
    sched = LR.StepDecay(0.1, 1, gamma=0.5)
    opt = gradxform.paddle.SGD(sched)
    state = opt.init({"w": jnp.ones(2)})
    with pytest.raises(RuntimeError, match="LRScheduler"):
        opt.set_lr(state, 0.2)
    with pytest.raises(TypeError, match="set_lr"):
        opt.set_lr(state, "0.2")
    sched.step()
    synced = opt.sync_lr(state)  # records scheduler() in the state; the update reads the scheduler anyway
    assert float(gradxform.get_hyper(synced, "learning_rate")) == np.float32(0.05)
    for s in (state, synced):
        np.testing.assert_allclose(opt.update({"w": jnp.ones(2)}, s, {"w": jnp.ones(2)})[0]["w"], [-0.05, -0.05])
    with pytest.raises(ValueError, match="sync_lr"):
        gradxform.paddle.SGD(0.1).sync_lr(state)


def test_another_family_given_a_paddle_scheduler_reads_it_in_each_update():
    for build in (lambda s: gradxform.create("mxnet.sgd", learning_rate=s),
                  lambda s: gradxform.create("sgd", lr_scheduler=s),
                  lambda s: gradxform.create("mindspore.momentum", learning_rate=s, momentum=0.0)):
        sched = LR.StepDecay(0.1, 1, gamma=0.5)
        tx = build(sched)
        params = {"w": jnp.zeros(2)}
        state = tx.init(params)
        step = jax.jit(lambda p, s: tx.update({"w": jnp.ones(2)}, s, p))
        for want in (-0.1, -0.05, -0.025):
            updates, state = step(params, state)
            np.testing.assert_allclose(updates["w"], [want, want], rtol=1e-6)
            sched.step()
    sched = LR.StepDecay(0.1, 1, gamma=0.5)  # by name, the Trainer reads it on the host for any family
    trainer = gradxform.Trainer({"w": jnp.zeros(2)}, "mxnet.sgd", {"learning_rate": sched},
                                devices=jax.devices()[:1])
    for want in (-0.1, -0.15, -0.175):
        trainer.update({"w": jnp.ones(2)}, 1)
        sched.step()
        np.testing.assert_allclose(trainer.params["w"], [want, want], rtol=1e-6)


# Each bound of gradxform.paddle.lr's constructors itself and one step past it, as paddle/optimizer/lr.py
# (3.3.1) checks them: LRScheduler 154-159, NoamDecay 386, PiecewiseDecay 497-503, NaturalExpDecay 600,
# PolynomialDecay 813-820, LinearWarmup 957-970, ExponentialDecay 1092, MultiStepDecay 1200-1211, StepDecay
# 1321-1329, ReduceOnPlateau 1562-1577 (patience, cooldown unchecked there), CosineAnnealingDecay 1789,
# OneCycleLR 2019-2046, CyclicLR 2273-2286, LinearLR 2446-2459, CosineAnnealingWarmRestarts 2575-2578.
# All 38 outcomes were run in Paddle 3.3.1 (the same expressions against paddle.optimizer.lr): the same.
# NoamDecay's warmup_steps is unchecked in Paddle, whose first get_lr (lr.py 398, `warmup_steps**-1.5`)
# raises ZeroDivisionError for 0 ("0.0 cannot be raised to a negative power", run in Paddle 3.3.1);
# gradxform refuses it at the argument instead.
LR_BOUNDS = [
    ("StepDecay(0.0, 1)", None), ("NoamDecay(0.5, 0.5)", None), ("PiecewiseDecay([2], [0.1, 0.2])", None),
    ("PolynomialDecay(0.1, 1, power=0.5)", None), ("LinearWarmup(0.1, 1, 0.0, 0.1)", None),
    ("ReduceOnPlateau(0.1, patience=0, cooldown=0)", None), ("CosineAnnealingDecay(0.1, 1)", None),
    ("OneCycleLR(0.1, 1, phase_pct=0.5)", None), ("OneCycleLR(0.1, 10, phase_pct=0.49, three_phase=True)", None),
    ("CyclicLR(0.1, 0.5, 1, 1)", None), ("LinearLR(0.1, 1, start_factor=1.0, end_factor=0.0)", None),
    ("CosineAnnealingWarmRestarts(0.1, 1)", None), ("ExponentialDecay(0.1, 0.999)", None),
    ("MultiStepDecay(0.1, [2, 3], gamma=0.999)", None),
    ("StepDecay(0.1, 0)", "step_size"), ("StepDecay(0.1, 2, gamma=1.0)", "gamma"), ("NoamDecay(0, 10)", "d_model"),
    ("PiecewiseDecay([], [0.1])", "boundaries"), ("PiecewiseDecay([2], [0.1])", "values"),
    ("NaturalExpDecay(0.1, 0.0)", "gamma"), ("PolynomialDecay(0.1, 4, power=0.0)", "power"),
    ("LinearWarmup('0.1', 5, 0.0, 0.1)", "learning_rate"), ("LinearWarmup(0.1, 5, 0.1, 0.1)", "end_lr"),
    ("ExponentialDecay(0.1, 0.0)", "gamma"), ("ExponentialDecay(0.1, 1.0)", "gamma"),
    ("MultiStepDecay(0.1, [3, 2, 5])", "milestones"), ("MultiStepDecay(0.1, [3, 3])", "milestones"),
    ("MultiStepDecay(0.1, [2], gamma=1.0)", "gamma"), ("ReduceOnPlateau(0.1, factor=1.0)", "factor"),
    ("ReduceOnPlateau('0.1')", "learning_rate"), ("OneCycleLR(0.1, 10, phase_pct=1.01)", "phase_pct"),
    ("OneCycleLR(0.1, 10, phase_pct=0.5, three_phase=True)", "phase_pct"),
    ("LinearLR(0.1, 5, start_factor=0.0)", "start_factor"), ("LinearLR(0.1, 5, start_factor=1.5)", "start_factor"),
    ("LinearLR(0.1, 5, end_factor=1.5)", "end_factor"), ("LinearLR(0.1, 0)", "total_steps"),
    ("CosineAnnealingWarmRestarts(0.1, 0)", "T_0"), ("CosineAnnealingWarmRestarts(0.1, 2, T_mult=0)", "T_mult"),
    ("NoamDecay(16, 0)", "warmup_steps"),
]


@pytest.mark.parametrize("expr, error", LR_BOUNDS, ids=[e for e, _ in LR_BOUNDS])
def test_scheduler_bounds_are_paddles(expr, error):
    ns = {n: getattr(LR, n) for n in LR.__all__}
    if error is None:
        eval(expr, ns)  # noqa: S307 (the table above)
    else:
        with pytest.raises((TypeError, ValueError), match=error):
            eval(expr, ns)  # noqa: S307


def test_plateau_state_and_metrics_as_paddle():
    # lr.py 1586-1593: a fresh ReduceOnPlateau's state (Paddle 3.3.1 by hand: this dict, best None);
    # 1633-1645: a one-element array is a metric, a string is a TypeError
    p = LR.ReduceOnPlateau(0.1)
    assert p.state_dict() == {"cooldown_counter": 0, "best": None, "num_bad_epochs": 0, "last_epoch": 0,
                              "last_lr": 0.1}
    with pytest.raises(TypeError, match="metrics"):
        p.step("0.5")
    p.step(np.array([0.3]))
    assert p.best == pytest.approx(0.3) and p.num_bad_epochs == 0


def test_set_state_dict_warns_only_for_extra_keys():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        sched = LR.StepDecay(0.1, 1, gamma=0.5)
        gradxform.paddle.SGD(sched)
        sched.step()
        sched.step()  # stepped without an update in between: nothing to warn about, each update reads it
        # Paddle lr.py 263-279: a missing key is an error, a key beyond state_keys a warning
        sched.set_state_dict({"last_epoch": 1, "last_lr": 0.05})
        assert w == []
        sched.set_state_dict({"last_epoch": 1, "last_lr": 0.05, "other": 0})
        assert [x.filename for x in w] == [__file__] and "unused values" in str(w[0].message)


def test_one_element_arrays_in_state_dict_become_floats_as_paddles_tensors():
    # lr.py 239-245 (Paddle 3.3.1): a Tensor state value must hold one element and is saved as
    # float(value), else AssertionError "numel of Tensor in state_dict must be 1" (both run in Paddle
    # 3.3.1 with a subclass holding paddle.to_tensor(0.25) and paddle.to_tensor([0.25, 0.5])); here an
    # array plays the Tensor's part
    class Holds(LR.LRScheduler):
        def __init__(self, extra):
            self.extra = extra
            super().__init__(0.1)

        def state_keys(self):
            self.keys = ["last_epoch", "last_lr", "extra"]

        def get_lr(self):
            return self.base_lr

    for one in (jnp.asarray(0.25), np.array([0.25])):
        sd = Holds(one).state_dict()
        assert sd == {"last_epoch": 0, "last_lr": 0.1, "extra": 0.25} and type(sd["extra"]) is float
    with pytest.raises(ValueError, match="extra"):
        Holds(jnp.asarray([0.25, 0.5])).state_dict()


def test_one_cycle_base_lr_is_the_initial_rate_as_paddle():
    # lr.py 2039 `initial_lr = max_learning_rate / float(divide_factor)`, 2093
    # `super().__init__(initial_lr, ...)`: base_lr 0.02 and 0.05 (printed by Paddle 3.3.1)
    assert LR.OneCycleLR(0.5, 40).base_lr == 0.5 / 25.0
    assert LR.OneCycleLR(0.5, 50, divide_factor=10.0, phase_pct=0.25, three_phase=True).base_lr == 0.05


def test_warm_restarts_step_with_an_epoch_at_t_mult_3_as_paddle():
    # lr.py 2623-2639 (Paddle 3.3.1): from epoch >= T_0, n = int(log(epoch / T_0 * (T_mult - 1) + 1, T_mult)),
    # T_cur = epoch - T_0 (T_mult ** n - 1) / (T_mult - 1), T_i = T_0 T_mult ** n. The recorded cases
    # have T_mult 1 and 2, where `/ (T_mult - 1)` and `* (T_mult - 1)` agree. (epoch, T_cur, T_i,
    # lr) printed by Paddle 3.3.1 for CosineAnnealingWarmRestarts(0.5, 3, T_mult=3, eta_min=0.01):
    want = [(4, 1.0, 9, 0.48522469209254754), (13, 1.0, 27, 0.49834339764677604), (2, 2, 3, 0.13250000000000006),
            (40, 1.0, 81, 0.49981574836353637), (12, 0.0, 27, 0.5), (3, 0.0, 9, 0.5), (39, 0.0, 81, 0.5)]
    s = LR.CosineAnnealingWarmRestarts(0.5, 3, T_mult=3, eta_min=0.01)
    for epoch, t_cur, t_i, lr in want:
        s.step(epoch=epoch)
        assert (s.T_cur, s.T_i, s.last_epoch) == (t_cur, t_i, epoch)
        assert s() == pytest.approx(lr, rel=1e-12) == cos_closed(0.5, t_i, 0.01, t_cur)


def test_a_set_state_dict_that_fails_changes_nothing():
    # a missing key or a value out of range is refused before any attribute is written
    sched = LR.StepDecay(0.1, 1, gamma=0.5)
    sched.step()
    before = dict(sched.state_dict())
    with pytest.raises(RuntimeError, match="last_lr"):
        sched.set_state_dict({"last_epoch": 7})
    with pytest.raises((TypeError, ValueError)):
        sched.set_state_dict({"last_epoch": 7, "last_lr": -1.0})
    assert sched.state_dict() == before
