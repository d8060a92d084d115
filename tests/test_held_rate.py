"""A scheduler object the user steps on the host, read by every update inside the user's own jit
(gradxform/schedules/_held.py): no sync call, never a stale rate, for every family's optimizer.

The reference for the rate is Paddle's dygraph loop: ``optimizer.step()`` reads ``scheduler()``
(a float32 tensor) and the script calls ``scheduler.step()`` after it, per batch or per epoch.
Rates compare bit for bit: both sides hold the same float32 value."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform
from gradxform.paddle import lr as LR
from gradxform._registry import keywords_of, registered_factory
from gradxform.schedules import _held

import cases
import quick_compile

PARAMS = {"w": jnp.array([[0.5, -1.0], [2.0, 0.25]]), "b": jnp.array([0.1, -0.3])}
GRADS = [{"w": jnp.array([[0.2, -0.4], [0.1, 0.3]]) * (t + 1), "b": jnp.array([0.05, -0.2]) / (t + 1)}
         for t in range(3)]


def _takes_a_learning_rate(name):
    # a wrapper (MindSpore LARS) takes the inner optimizer and its rate; its own learning_rate is a clip bound
    return "learning_rate" in keywords_of(registered_factory(name)) and "optimizer" not in cases.case(name).kwargs


HELD = [n for n in cases.names() if _takes_a_learning_rate(n)]


def _run(tx, rates_before_each_update, sched=None):
    """Three jitted updates; before update t the rate is set to ``rates[t]`` (by stepping
    ``sched``, or by `set_learning_rate` when ``sched`` is None). One trace for all."""
    state = tx.init(PARAMS)
    params = PARAMS

    @quick_compile.jit  # both sides compiled alike, compared within a tolerance
    def step(params, state, grads):
        updates, state = tx.update(grads, state, params)
        return gradxform.apply_updates(params, updates), state

    out = []
    for t, grads in enumerate(GRADS):
        if sched is None:
            state = gradxform.set_learning_rate(state, rates_before_each_update[t])
        elif t:
            sched.step()
        params, state = step(params, state, grads)
        out.append(params)
    return out, step._cache_size()


@pytest.mark.parametrize("name", HELD)
def test_every_optimizer_built_with_a_stepped_scheduler_uses_its_rate_at_every_update(name):
    # StepDecay(0.1, 1, 0.5) stepped after each update: 0.1, 0.05, 0.025, read by the update itself
    sched = LR.StepDecay(0.1, 1, gamma=0.5)
    c = cases.case(name)
    if not c.takes_schedule:  # the framework refuses a scheduler here too: refused at once, naming it
        with pytest.raises(TypeError, match="learning_rate"):
            cases.create(name, learning_rate=sched)
        return
    held, held_traces = _run(cases.create(name, learning_rate=sched), None, sched)
    fixed, fixed_traces = _run(cases.create(name, learning_rate=0.1), [0.1, 0.05, 0.025])
    assert held_traces <= fixed_traces  # a new rate is never a new trace (1, or what the fixed rate takes)
    for t, (a, b) in enumerate(zip(held, fixed)):
        for k in PARAMS:
            np.testing.assert_allclose(a[k], b[k], rtol=c.rtol, atol=c.atol, err_msg=f"{name} update {t} {k}")


def test_a_loop_written_as_paddles_trains_at_paddles_rate_without_a_sync_call():
    # LinearWarmup(start_lr=0.0): with a stale rate nothing would ever move
    sched = LR.LinearWarmup(0.1, 4, 0.0, 0.1)
    opt = gradxform.paddle.Momentum(sched, momentum=0.0)
    params, state = {"w": jnp.zeros(2)}, None
    state = opt.init(params)

    @jax.jit
    def train_step(params, state):
        updates, state = opt.update({"w": jnp.ones(2)}, state, params)
        return gradxform.apply_updates(params, updates), state

    used = []
    for _ in range(6):
        params, state = train_step(params, state)
        used.append(opt.get_lr(state))  # Paddle: between optimizer.step() and lr.step(), the rate just applied
        sched.step()
    np.testing.assert_allclose(used, [0.0, 0.025, 0.05, 0.075, 0.1, 0.1], rtol=1e-15)
    want = -np.cumsum(np.float32(used), dtype=np.float32)[-1]
    np.testing.assert_allclose(params["w"], [want, want], rtol=1e-6)
    assert train_step._cache_size() == 1


def test_a_per_epoch_scheduler_holds_its_rate_for_the_epoch_inside_scan():
    sched = LR.PiecewiseDecay([1], [0.1, 0.01])
    opt = gradxform.paddle.SGD(sched)
    params = {"w": jnp.zeros(())}
    state = opt.init(params)

    @jax.jit
    def epoch(params, state):
        def body(carry, _):
            p, s = carry
            u, s = opt.update({"w": jnp.ones(())}, s, p)
            return (gradxform.apply_updates(p, u), s), None
        return jax.lax.scan(body, (params, state), None, length=4)[0]

    params, state = epoch(params, state)
    np.testing.assert_allclose(params["w"], -0.4, rtol=1e-6)
    sched.step()
    params, state = epoch(params, state)
    np.testing.assert_allclose(params["w"], -0.44, rtol=1e-6)


def test_vmapped_and_sharded_updates_read_the_scheduler():
    sched = LR.StepDecay(0.2, 1, gamma=0.5)
    opt = gradxform.paddle.SGD(sched)
    batch = {"w": jnp.zeros((4, 3))}
    states = jax.vmap(opt.init)(batch)
    sched.step()
    ups, _ = jax.jit(jax.vmap(opt.update))({"w": jnp.ones((4, 3))}, states, batch)
    np.testing.assert_array_equal(ups["w"], np.full((4, 3), -0.1, np.float32))
    mesh = jax.make_mesh((4,), ("d",))
    sharded = jax.device_put({"w": jnp.zeros(8)}, jax.NamedSharding(mesh, jax.P("d")))
    state = opt.init(sharded)
    ups, _ = jax.jit(opt.update)({"w": jnp.ones(8)}, state, sharded)
    np.testing.assert_array_equal(ups["w"], np.full(8, -0.1, np.float32))


def test_a_scheduler_waits_for_updates_in_flight_before_it_changes(monkeypatch):
    # JAX dispatches asynchronously: without the wait, an update dispatched before sched.step() could
    # read the next rate. Every public attribute write of a held scheduler waits first, a user
    # subclass's own step() included; a scheduler no optimizer reads never waits.
    waits = []
    monkeypatch.setattr(jax, "live_arrays", lambda: waits.append(1) or [])

    class Halving(LR.LRScheduler):
        def step(self, epoch=None):  # a user's override that writes last_lr itself
            self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
            self.last_lr = self.base_lr * 0.5 ** self.last_epoch

    free = Halving(0.1)
    free.step()
    assert waits == []
    sched = Halving(0.1)
    gradxform.paddle.SGD(sched)
    sched.step()
    assert len(waits) == 2  # last_epoch, last_lr
    sched.set_state_dict({"last_epoch": 4, "last_lr": 0.00625})
    assert len(waits) >= 4 and sched() == 0.00625


def test_a_duck_typed_scheduler_gets_a_waiting_step(monkeypatch):
    class Mine:  # Paddle's protocol, not gradxform's class (a real paddle scheduler looks like this)
        def __init__(self):
            self.last_epoch, self.last_lr = 0, 0.1

        def __call__(self):
            return self.last_lr

        def step(self):
            self.last_epoch += 1
            self.last_lr /= 10

    waits = []
    monkeypatch.setattr(jax, "live_arrays", lambda: waits.append(1) or [])
    sched = Mine()
    tx = gradxform.create("mxnet.sgd", lr_scheduler=sched)  # another family's optimizer
    state = tx.init({"w": jnp.zeros(2)})
    sched.step()
    assert waits == [1]
    ups, _ = jax.jit(tx.update)({"w": jnp.ones(2)}, state, {"w": jnp.zeros(2)})
    np.testing.assert_allclose(ups["w"], [-0.01, -0.01], rtol=1e-6)


def test_the_read_inside_a_callback_never_waits_for_itself(monkeypatch):
    # a user's __call__ that writes an attribute runs inside the host callback: waiting there for the
    # computation that runs the callback would deadlock
    class Counting(LR.StepDecay):
        def __call__(self):
            self.reads = getattr(self, "reads", 0) + 1
            return super().__call__()

    sched = Counting(0.1, 1)
    tx = gradxform.paddle.SGD(sched)
    state = tx.init({"w": jnp.zeros(2)})
    jax.block_until_ready(jax.jit(tx.update)({"w": jnp.ones(2)}, state, {"w": jnp.zeros(2)}))
    assert sched.reads >= 2  # construction, and the update's read


def test_a_program_with_a_host_read_cannot_be_exported_silently():
    tx = gradxform.paddle.SGD(LR.StepDecay(0.1, 1))
    state = tx.init({"w": jnp.zeros(2)})
    with pytest.raises(Exception, match="(?i)callback"):
        jax.export.export(jax.jit(tx.update))({"w": jnp.ones(2)}, state, {"w": jnp.zeros(2)})


def test_a_held_rate_ignores_the_base_and_is_held_per_object():
    sched = LR.StepDecay(0.1, 1)
    rate = _held.HeldRate(sched)
    assert rate.base_lr == 0.1 and rate.reads_host
    np.testing.assert_array_equal(rate(jnp.arange(3), base_lr=5.0), np.full(3, 0.1, np.float32))
    assert "HeldRate" in repr(rate)


def _warmup_run():
    sched = LR.LinearWarmup(LR.CosineAnnealingDecay(0.1, T_max=10), 4, 0.0, 0.1)
    return sched, gradxform.paddle.Momentum(sched, momentum=0.9)


def test_a_state_resumed_beside_a_restarted_scheduler_is_refused_and_a_restored_one_continues():
    # issue 38: a run resumed at iteration 7 ran at the warmup's start; here the first update after the
    # restore refuses (ScheduleRestartError), and restoring the scheduler's state_dict continues exactly
    def train(sched, opt, params, state, n):
        step = jax.jit(lambda p, s: opt.update({"w": jnp.ones(2)}, s, p))
        for _ in range(n):
            u, state = step(params, state)
            params = gradxform.apply_updates(params, u)
            sched.step()
        return params, state

    sched, opt = _warmup_run()
    params = {"w": jnp.zeros(2)}
    whole = train(sched, opt, params, opt.init(params), 8)[0]
    sched, opt = _warmup_run()
    params, state = train(sched, opt, params, opt.init(params), 5)
    saved = sched.state_dict()
    sched, opt = _warmup_run()  # a new process: the scheduler as built
    with pytest.raises(Exception, match="ScheduleRestartError|restart its schedule"):
        jax.block_until_ready(opt.update({"w": jnp.ones(2)}, state, params))
    sched.set_state_dict(saved)
    np.testing.assert_array_equal(train(sched, opt, params, state, 3)[0]["w"], whole["w"])


def test_the_trainer_saves_and_restores_a_host_schedulers_position(tmp_path):
    # Gluon pickles the optimizer with its scheduler: a loaded Trainer goes on where the file stopped
    def trainer(sched):
        return gradxform.Trainer({"w": jnp.zeros(2)}, "paddle.momentum", {"learning_rate": sched, "momentum": 0.9},
                                 devices=jax.devices()[:1])

    sched = _warmup_run()[0]
    t = trainer(sched)
    for i in range(8):
        if i == 5:
            t.save_states(tmp_path / "run.ckpt")
        t.update({"w": jnp.ones(2)}, 1)
        sched.step()
    sched = _warmup_run()[0]
    resumed = trainer(sched)
    resumed.load_states(tmp_path / "run.ckpt")
    assert sched.last_epoch == 5
    for _ in range(3):
        resumed.update({"w": jnp.ones(2)}, 1)
        sched.step()
    np.testing.assert_array_equal(resumed.params["w"], t.params["w"])
