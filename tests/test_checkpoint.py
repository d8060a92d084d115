"""gradxform.checkpoint: bit-exact round trips, and every bad file is refused with its kind."""
import os
import signal
import subprocess
import sys
import textwrap
import types
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from optax.tree_utils import tree_get as optax_tree_get

import gradxform
import gradxform._files
from gradxform.checkpoint import CheckpointError, load_state, read_metadata, save_state

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def params():
    return {"w": jnp.arange(12, dtype=jnp.float32).reshape(3, 4) / 7, "b": jnp.full((4,), 0.1, jnp.float32)}


def adam_state():
    tx = gradxform.create("adam", learning_rate=0.01)
    p = params()
    return jax.jit(lambda p: tx.update(jax.tree.map(jnp.ones_like, p), tx.init(p), p)[1])(p)


def bits(x):
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(x).tobytes(), np.asarray(x).dtype, np.shape(x)


def assert_bit_equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        assert bits(x) == bits(y)
        assert x.dtype == y.dtype


@pytest.fixture()
def saved(tmp_path):
    state = adam_state()
    path = tmp_path / "adam.ckpt"
    save_state(path, state, meta={"optimizer": "mxnet.adam"})
    return path, state


def test_round_trip_is_bit_exact(saved, tmp_path):
    path, state = saved
    loaded = load_state(path, like=state)
    assert_bit_equal(loaded, state)
    # abstract `like` (eval_shape) works too, and so do keys, bfloat16, NaN payloads and ints
    # (each typed key implementation: threefry2x32 keys are 2 uint32 words, rbg and unsafe_rbg keys 4)
    odd = {"key": jax.random.split(jax.random.key(7), 3), "bf": jnp.array([1.5, -0.0], jnp.bfloat16),
           "nan": jnp.array([np.nan, np.inf, -np.inf], jnp.float32), "i": jnp.arange(5, dtype=jnp.int32),
           "empty": jnp.zeros((0, 3)),
           **{name: jax.random.wrap_key_data(np.arange(8, dtype=np.uint32).reshape(2, 4) * 977, impl=impl)
              for name, impl in (("rbg", "rbg"), ("urbg", "unsafe_rbg"))}}
    # meta maps may have non-string keys (msgpack's strict_map_key=False on both sides)
    meta = {"lr_at_step": {100: 0.01, 200: 1e-3}, 7: [None, b"\x00"]}
    save_state(tmp_path / "odd.ckpt", odd, meta=meta)
    assert_bit_equal(load_state(tmp_path / "odd.ckpt", like=jax.eval_shape(lambda: odd), meta=meta), odd)
    assert read_metadata(path) == {"optimizer": "mxnet.adam"}
    assert read_metadata(tmp_path / "odd.ckpt") == meta
    assert sorted(load_state(tmp_path / "odd.ckpt")) == ["['bf']", "['empty']", "['i']", "['key']", "['nan']",
                                                          "['rbg']", "['urbg']"]


def test_truncated_file_at_several_offsets(saved, tmp_path):
    path, state = saved
    data = path.read_bytes()
    for cut in (0, 7, 16, 31, 32, 60, len(data) // 2, len(data) - 1):
        bad = tmp_path / f"cut{cut}.ckpt"
        bad.write_bytes(data[:cut])
        with pytest.raises(CheckpointError) as err:
            load_state(bad, like=state)
        assert err.value.kind == "truncated", (cut, str(err.value))
        # under 32 bytes (the fixed prefix) it says so; from 32 on, the prefix is read and checked,
        # and the message gives the length the file was written with
        want = f"only {cut} bytes" if cut < 32 else f"{cut} bytes of the {len(data)} it was written with"
        assert want in str(err.value), (cut, str(err.value))
    # the prefix alone (32 bytes), its length field changed: the prefix checksum catches it
    flipped = bytearray(data[:32])
    flipped[16] ^= 0x01
    (tmp_path / "prefix.ckpt").write_bytes(bytes(flipped))
    with pytest.raises(CheckpointError, match="the length fields fail their checksum") as err:
        load_state(tmp_path / "prefix.ckpt", like=state)
    assert err.value.kind == "corrupt"


def test_flipped_byte_is_corrupt(saved, tmp_path):
    path, state = saved
    data = path.read_bytes()
    for pos in (2, 9, 20, 27, 40, len(data) - 200, len(data) - 1):
        flipped = bytearray(data)
        flipped[pos] ^= 0x04
        bad = tmp_path / f"flip{pos}.ckpt"
        bad.write_bytes(bytes(flipped))
        with pytest.raises(CheckpointError) as err:
            load_state(bad, like=state)
        assert err.value.kind == "corrupt", (pos, str(err.value))
    extra = tmp_path / "extra.ckpt"
    extra.write_bytes(data + b"\0")
    with pytest.raises(CheckpointError, match="unexpected bytes") as err:
        load_state(extra, like=state)
    assert err.value.kind == "corrupt"


def test_file_from_another_optimizer_is_a_mismatch(saved, tmp_path):
    path, _ = saved
    sgd = gradxform.create("sgd", learning_rate=0.1, momentum=0.9).init(params())
    with pytest.raises(CheckpointError, match="another tree") as err:
        load_state(path, like=sgd)
    assert err.value.kind == "mismatch"
    # same structure, other shape
    other = adam_state()
    other_path = tmp_path / "small.ckpt"
    small = gradxform.create("adam").init({"w": jnp.zeros((3, 5)), "b": jnp.zeros(4)})
    save_state(other_path, small)
    with pytest.raises(CheckpointError, match=r"float32\[3,5\] in the file; expected float32\[3,4\]") as err:
        load_state(other_path, like=other)
    assert err.value.kind == "mismatch"
    with pytest.raises(CheckpointError, match="meta") as err:
        load_state(path, like=other, meta={"optimizer": "mxnet.nag"})
    assert err.value.kind == "mismatch"
    assert isinstance(err.value, ValueError)


def test_save_refuses_what_it_could_not_load(tmp_path):
    path = tmp_path / "x.ckpt"
    with pytest.raises(TypeError, match=r"leaf \['names'\] has dtype <U3, which checkpoints do not store"):
        save_state(path, {"w": jnp.zeros(2), "names": np.array(["abc"])})
    with pytest.raises(TypeError, match=r"leaf \['o'\] has dtype object"):
        save_state(path, {"o": np.array([None, 1], dtype=object)})
    deep = 1
    for _ in range(40):
        deep = [deep]
    with pytest.raises(TypeError, match="meta must hold only .* nested more than 32 deep"):
        save_state(path, {"w": jnp.zeros(2)}, meta={"deep": deep})
    assert not os.listdir(tmp_path)  # nothing written
    # rank 32, the bound, is stored; 33 is not (the header check's bound, _MAX_RANK)
    with pytest.raises(TypeError, match=r"leaf \['r'\] has rank 33; checkpoints store at most 32"):
        save_state(path, {"r": np.zeros((1,) * 33)})
    save_state(path, {"r": np.zeros((1,) * 31 + (2,))})
    assert load_state(path)["['r']"].shape == (1,) * 31 + (2,)
    # the bound itself: a value inside 32 containers (meta's own map counts), lists or maps, is kept;
    # inside 33 it is not
    for wrap in (lambda x: [x], lambda x: {"k": x}):
        deep = 1
        for _ in range(31):
            deep = wrap(deep)
        save_state(path, {"w": jnp.zeros(2)}, meta={"deep": deep})
        assert read_metadata(path) == {"deep": deep}
        with pytest.raises(TypeError, match="nested more than 32 deep"):
            save_state(tmp_path / "y.ckpt", {"w": jnp.zeros(2)}, meta={"deep": wrap(deep)})


_WRITER = textwrap.dedent("""
    import os, sys, time
    os.environ["JAX_PLATFORMS"] = "cpu"
    sys.path.insert(0, {repo!r})
    import numpy as np
    from gradxform import checkpoint

    def stall():
        print("WRITING", flush=True)
        time.sleep(60)

    if {stage!r} == "payload":  # stop after the first 4 MiB chunk of the payload reached the disk
        real_fdopen = os.fdopen

        class Slow:
            def __init__(self, f):
                self.f, self.n = f, 0
            def write(self, b):
                self.n += 1
                out = self.f.write(b)
                if self.n == 4:
                    self.f.flush()
                    stall()
                return out
            def __getattr__(self, name):
                return getattr(self.f, name)
            def __enter__(self):
                return self
            def __exit__(self, *exc):
                return self.f.__exit__(*exc)

        os.fdopen = lambda fd, mode: Slow(real_fdopen(fd, mode))
    else:  # every byte written, not yet synced nor renamed
        os.fsync = lambda fd: stall()
    checkpoint.save_state({path!r}, {{"w": np.full((4, 1 << 20), 2.0, np.float32)}})  # 16 MiB
""")


def backdate(file, seconds=120):
    """Ages a file past gradxform._files._STRAY_AGE_S (60 s)."""
    then = os.path.getmtime(file) - seconds
    os.utime(file, (then, then))


@pytest.mark.parametrize("stage", ["payload", "fsync"])
def test_killed_mid_write_leaves_the_old_file(tmp_path, stage):
    path = tmp_path / "state.ckpt"
    old = {"w": np.ones((4, 1 << 20), np.float32)}
    save_state(path, old)
    proc = subprocess.Popen([sys.executable, "-c", _WRITER.format(repo=REPO, path=str(path), stage=stage)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "WRITING"
        tmp = [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]
        size = os.path.getsize(tmp_path / tmp[0])
        assert len(tmp) == 1
        assert (size < 16 << 20) if stage == "payload" else (size > 16 << 20)
        # the writer is alive and holds its lock: a save meanwhile leaves its file alone, however old
        backdate(tmp_path / tmp[0])
        save_state(path, old)
        assert os.path.exists(tmp_path / tmp[0])
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    loaded = load_state(path, like=old)
    np.testing.assert_array_equal(loaded["w"], old["w"])
    # the stray temporary file does not stop the next save, which removes it
    new = {"w": np.full((4, 1 << 20), 3.0, np.float32)}
    save_state(path, new)
    np.testing.assert_array_equal(load_state(path, like=new)["w"], new["w"])
    assert [f for f in os.listdir(tmp_path) if f.endswith(".tmp")] == []


def test_next_save_removes_only_stray_temps_of_that_path(tmp_path):
    """A stray temp is one of this path's, unlocked (its writer is dead) and unmodified for 60 s."""
    fcntl = pytest.importorskip("fcntl")
    path = tmp_path / "s.ckpt"
    names = {"stray": ".s.ckpt.abcd_123.tmp", "fresh": ".s.ckpt.fresh000.tmp", "locked": ".s.ckpt.locked00.tmp",
             "other path": ".s.ckpt.bak.abcd_123.tmp", "other name": ".t.ckpt.abcd_123.tmp",
             "not mkstemp's": ".s.ckpt.ABCD1234.tmp", "old stray": ".s.ckpt.zzzzzzzz.tmp"}
    for key, name in names.items():
        (tmp_path / name).write_bytes(b"partial")
        if key != "fresh":
            backdate(tmp_path / name, 3600 if key == "old stray" else 120)
    os.mkdir(tmp_path / ".s.ckpt.adirectr.tmp")
    os.utime(tmp_path / ".s.ckpt.adirectr.tmp", (0, 0))
    holder = open(tmp_path / names["locked"], "rb+")  # a live writer, as far as flock can tell
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        save_state(path, params())
        left = sorted(os.listdir(tmp_path))
        assert left == sorted([".s.ckpt.adirectr.tmp", "s.ckpt"] + [n for k, n in names.items() if "stray" not in k])
    finally:
        holder.close()  # the writer "dies": its file is stray on the save after
    save_state(path, params())
    assert sorted(os.listdir(tmp_path)) == sorted([".s.ckpt.adirectr.tmp", "s.ckpt", names["fresh"],
                                                  names["other path"], names["other name"], names["not mkstemp's"]])
    assert_bit_equal(load_state(path, like=params()), params())


@pytest.mark.parametrize("locks, bound", [(True, 60.0), (False, 3600.0)])
def test_a_temp_is_stray_from_its_age_bound_on(tmp_path, monkeypatch, locks, bound):
    """`gradxform._files.remove_stray_temps`: a temp unmodified for 60 s (_STRAY_AGE_S) is stray where advisory
    locks exist, for 3600 s (_NO_LOCK_AGE_S) where they do not (Windows: age is the only evidence);
    the bound itself counts. The clock is fixed so the ages are exact."""
    if not locks:
        monkeypatch.setattr(gradxform._files, "fcntl", None)
    now = 1_700_000_000
    monkeypatch.setattr(gradxform._files, "time", types.SimpleNamespace(time=lambda: float(now)))
    for name, age in ((".s.ckpt.atbound0.tmp", bound), (".s.ckpt.under000.tmp", bound - 0.5)):
        (tmp_path / name).write_bytes(b"partial")
        os.utime(tmp_path / name, (now - age, now - age))
    save_state(tmp_path / "s.ckpt", {"w": np.zeros(2)})
    assert sorted(os.listdir(tmp_path)) == [".s.ckpt.under000.tmp", "s.ckpt"]


@pytest.mark.parametrize("nofollow", [True, False])
def test_a_temp_is_opened_read_write_and_a_link_never_followed(tmp_path, monkeypatch, nofollow):
    """`gradxform._files.remove_stray_temps` opens a candidate read-write (NFS grants a flock only on a writable
    descriptor) and with O_NOFOLLOW where the platform has it; where it has not, a symbolic link
    named like a temp is still left alone (it is not a regular file: scandir's
    is_file(follow_symlinks=False)), as is the old file it points to."""
    from gradxform import checkpoint  # noqa: PLC0415
    (tmp_path / ".s.ckpt.abcd_123.tmp").write_bytes(b"partial")
    (tmp_path / "target").write_bytes(b"x")
    os.symlink(tmp_path / "target", tmp_path / ".s.ckpt.alink000.tmp")
    for name in (".s.ckpt.abcd_123.tmp", "target"):
        backdate(tmp_path / name)
    if not nofollow:
        monkeypatch.delattr(os, "O_NOFOLLOW")
    opened, real_open = [], os.open
    monkeypatch.setattr(checkpoint.os, "open", lambda name, flags, *a: opened.append((os.path.basename(name), flags))
                        or real_open(name, flags, *a))
    save_state(tmp_path / "s.ckpt", {"w": np.zeros(2)})
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == [".s.ckpt.alink000.tmp", "s.ckpt", "target"]
    want = os.O_RDWR | (os.O_NOFOLLOW if nofollow else 0)
    assert [(n, f) for n, f in opened if n in (".s.ckpt.abcd_123.tmp", ".s.ckpt.alink000.tmp")] == \
        [(".s.ckpt.abcd_123.tmp", want)]  # (mkstemp opens its own temp with os.open too)


def test_a_temp_a_cleaner_takes_before_it_is_locked_is_replaced(tmp_path, monkeypatch):
    """`gradxform._files.create_locked_temp`: a cleaner may remove a new temp between mkstemp and flock (it is unlocked
    then); the writer sees its name gone and makes another, and the save succeeds."""
    import tempfile  # noqa: PLC0415

    made = []

    def mkstemp(**kw):
        fd, name = tempfile.mkstemp(**kw)
        made.append(name)
        if len(made) == 1:
            os.unlink(name)  # the cleaner's
        return fd, name

    monkeypatch.setattr(gradxform._files, "tempfile", types.SimpleNamespace(mkstemp=mkstemp))
    save_state(tmp_path / "s.ckpt", {"w": np.arange(3.0)})
    assert len(made) == 2 and os.listdir(tmp_path) == ["s.ckpt"]
    np.testing.assert_array_equal(load_state(tmp_path / "s.ckpt")["['w']"], np.arange(3.0))


_CONCURRENT = textwrap.dedent("""
    import os, sys, time
    os.environ["JAX_PLATFORMS"] = "cpu"
    sys.path.insert(0, {repo!r})
    import numpy as np
    from gradxform import _files, checkpoint

    _files._STRAY_AGE_S = 0.0  # only the writers' locks protect their files: the harshest cleaner
    state = {{"w": np.full((1 << 18,), {value}, np.float32), "i": np.arange({value}, dtype=np.int32)}}
    print("READY", flush=True)
    while not os.path.exists({go!r}):
        time.sleep(0.001)
    for _ in range({rounds}):
        checkpoint.save_state({path!r}, state, meta={{"writer": {value}}})
    print("DONE", flush=True)
""")


def test_concurrent_writers_keep_each_others_files_and_leave_a_loadable_one(tmp_path):
    """Two processes save to one path 40 times each, every save first cleaning that path's temps with no
    age margin: neither loses its temp file, every read meanwhile gets one whole state, and at the end
    the file is one writer's state and no temp is left."""
    path, go = tmp_path / "shared.ckpt", tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", _CONCURRENT.format(repo=REPO, path=str(path), go=str(go),
                                                                         value=value, rounds=40)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for value in (1, 2)]
    states = {v: {"w": np.full((1 << 18,), v, np.float32), "i": np.arange(v, dtype=np.int32)} for v in (1, 2)}
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "READY", p.stderr.read()
        go.touch()
        reads = 0
        while any(p.poll() is None for p in procs):
            if path.exists():  # one read, as the file may be replaced between two
                got = load_state(path)
                writer = got["['i']"].size
                np.testing.assert_array_equal(got["['w']"], states[writer]["w"])
                assert read_metadata(path)["writer"] in (1, 2)
                reads += 1
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=30)
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    assert [out.strip() for out, _ in outs] == ["DONE", "DONE"]
    assert reads > 0
    writer = read_metadata(path)["writer"]
    np.testing.assert_array_equal(load_state(path, like=states[writer])["w"], states[writer]["w"])
    assert sorted(os.listdir(tmp_path)) == ["go", "shared.ckpt"]


def test_a_state_with_per_leaf_counts_loads_through_alternatives(tmp_path):
    params = {"a": jnp.ones(2), "b": jnp.ones(3)}
    tx = gradxform.create("adam", learning_rate=0.1)
    fresh = tx.init(params)
    _, masked = tx.update(params, fresh, params, update_mask={"a": True, "b": False})
    gradxform.save_state(tmp_path / "s", masked)
    with pytest.raises(gradxform.CheckpointError, match="per_leaf_counts") as err:
        gradxform.load_state(tmp_path / "s", like=fresh)
    assert err.value.kind == "mismatch"
    out = gradxform.load_state(tmp_path / "s", like=fresh, alternatives=[gradxform.per_leaf_counts(fresh, params)])
    assert [int(c) for c in np.asarray(out[0].leaf_counts)] == [1, 0]
    jax.tree.map(np.testing.assert_array_equal, out, masked)


def test_a_header_larger_than_its_bound_is_neither_written_nor_read(tmp_path):
    """A header is counted against the file before msgpack decodes it (4x the file + 1 MiB):
    a forged one of 100,000 empty arrays, with right checksums, is refused as corrupt without being
    built; save_state refuses a tree whose header would break that bound (10,000 scalar leaves),
    so nothing it writes is unreadable, and writes 1,000 of them."""
    import hashlib  # noqa: PLC0415
    import struct  # noqa: PLC0415
    import tracemalloc  # noqa: PLC0415
    header = b"\xdd" + struct.pack(">I", 100_000) + b"\x90" * 100_000
    head = struct.pack("<8sQQ", b"GXCKPT\x00\x01", len(header), 32 + len(header) + 32)
    (tmp_path / "forged").write_bytes(head + hashlib.sha256(head).digest()[:8] + header
                                      + hashlib.sha256(header).digest())
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match="would take more than .* decoded") as err:
            load_state(tmp_path / "forged")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert err.value.kind == "corrupt" and peak < 2 * len(header) + (256 << 10)  # the file, not 6.4 MB decoded
    with pytest.raises(ValueError, match="store fewer, larger leaves"):
        save_state(tmp_path / "many", {f"k{i}": np.float32(i) for i in range(10_000)})
    assert not (tmp_path / "many").exists()
    tree = {f"k{i}": np.float32(i) for i in range(1_000)}
    save_state(tmp_path / "ok", tree)
    assert load_state(tmp_path / "ok", like=tree) == tree


def test_paths_of_every_type_and_open_files(tmp_path):
    tree = {"a": np.arange(3.0)}
    save_state(bytes(tmp_path / "x"), tree)
    for path in (str(tmp_path / "x"), bytes(tmp_path / "x"), tmp_path / "x"):
        np.testing.assert_array_equal(load_state(path, like=tree)["a"], tree["a"])
    with open(tmp_path / "x", "rb") as f:
        np.testing.assert_array_equal(load_state(f, like=tree)["a"], tree["a"])
    # a NumPy leaf of ``like`` is read as NumPy (load_state's docstring), and so is every leaf without one
    assert type(load_state(tmp_path / "x", like=tree)["a"]) is np.ndarray
    assert type(load_state(tmp_path / "x")["['a']"]) is np.ndarray
    with pytest.raises(TypeError, match="needs a path"), open(tmp_path / "y", "wb") as f:
        save_state(f, tree)

    class Sink:  # anything with a write (or a read) is a file, not a path
        def write(self, data):
            return len(data)

    with pytest.raises(TypeError, match="needs a path .* not an open file \\(Sink\\)"):
        save_state(Sink(), tree)
    with pytest.raises(TypeError, match="expected a path"):
        load_state(3.5, like=tree)
    (tmp_path / "garbage").write_bytes(b"not a checkpoint")
    with open(tmp_path / "garbage", "rb") as f, pytest.raises(CheckpointError, match="garbage"):
        load_state(f, like=tree)


def _forge(path, out, leaf: str, value) -> None:
    """``path`` with the value of the leaf whose path contains ``leaf`` replaced and every checksum
    recomputed: a file only the values tell from a real one."""
    import hashlib  # noqa: PLC0415
    import msgpack  # noqa: PLC0415
    data = bytearray(open(path, "rb").read())
    hlen = int.from_bytes(data[8:16], "little")
    header = msgpack.unpackb(bytes(data[32:32 + hlen]), raw=False, strict_map_key=False)
    start = 64 + hlen
    (p, _, dtype, off, n), = [e for e in header["leaves"] if leaf in e[0]][:1]
    data[start + off:start + off + n] = np.asarray(value, np.dtype(dtype)).tobytes()
    header["payload_sha256"] = hashlib.sha256(bytes(data[start:])).hexdigest()
    raw = msgpack.packb(header, use_bin_type=True)
    assert len(raw) == hlen
    data[32:32 + hlen] = raw
    data[32 + hlen:start] = hashlib.sha256(raw).digest()
    open(out, "wb").write(bytes(data))


@pytest.mark.parametrize("leaf, value, match", [
    ("['learning_rate']", np.nan, "learning_rate"), ("['learning_rate']", -1.0, "learning_rate"),
    ("['beta1']", 1.5, "beta1"), ("['epsilon']", 0.0, "epsilon"),
    ("[0].count", -5, "StepState.count"), ("[0].count", 2**31 - 1, "StepState.count"),
])
def test_trainer_refuses_checkpoint_values_no_run_reaches(tmp_path, leaf, value, match):
    """A checkpoint with valid checksums whose hyperparameters or step count are out of range
    (learning rate NaN gave NaN parameters after one step) is refused as corrupt, with the
    hyperparameter's declared range (gradxform._ranges, as set_hyper checks it), and the Trainer
    keeps its state."""
    from gradxform.trainer import Trainer  # noqa: PLC0415
    params = {"a": jnp.ones(3), "b": jnp.zeros(2)}
    t = Trainer(params, "adam", {"learning_rate": 0.01}, devices=jax.devices()[:1])
    t.step({"a": np.ones((1, 3), np.float32), "b": np.ones((1, 2), np.float32)}, 8)
    t.save_states(tmp_path / "good")
    _forge(tmp_path / "good", tmp_path / "bad", leaf, value)
    u = Trainer(params, "adam", {"learning_rate": 0.01}, devices=jax.devices()[:1])
    before = [np.asarray(x).copy() for x in jax.tree.leaves((u.params, u.state))]
    with pytest.raises(CheckpointError, match=f"{match}.*must be in") as err:
        u.load_states(tmp_path / "bad")
    assert err.value.kind == "corrupt" and str(tmp_path / "bad") in str(err.value)
    for a, b in zip(before, jax.tree.leaves((u.params, u.state))):
        np.testing.assert_array_equal(a, np.asarray(b))
    u.load_states(tmp_path / "good")


FIXTURES = os.path.join(REPO, "tests", "fixtures", "gradxform")
LEGACY_PARAMS = {"b": jnp.asarray([0.5, -1.0, 2.0], jnp.float32),
                 "w": jnp.asarray([[1.0, -2.0], [0.25, 3.0]], jnp.float32)}


def _legacy_grads(k):  # tools/legacy_checkpoint_fixtures.py's
    return jax.tree.map(lambda p: jnp.sin(p * (k + 1)) + 0.1 * k, LEGACY_PARAMS)


@pytest.mark.parametrize("name, kwargs", [
    ("paddle.momentum", dict(learning_rate=0.1, momentum=0.9, use_nesterov=True, skip_nonfinite=True)),
    ("mindspore.adam", dict(learning_rate=0.05, weight_decay=1e-3, skip_nonfinite=True)),
    ("mxnet.adam", dict(learning_rate=0.05, wd=1e-3, lr_mult={"b": 0.5})),
])
def test_files_from_before_the_count_rename_load_and_continue_bit_for_bit(name, kwargs):
    """Files written at 8945dd9 (StepState ``count`` per leaf and ``num_update``; bool flags),
    recorded with the parameters one more update gave then: loaded into today's state
    (``leaf_counts`` and ``count``; int32 flags), the next update gives the same bits."""
    tx = gradxform.create(name, **kwargs)
    fresh = tx.init(LEGACY_PARAMS)
    like = {"params": LEGACY_PARAMS, "state": fresh}
    alt = {"params": LEGACY_PARAMS, "state": gradxform.per_leaf_counts(fresh, LEGACY_PARAMS)}
    got = load_state(os.path.join(FIXTURES, f"legacy_{name}.gxckpt"), like=like, alternatives=[alt])
    assert jax.tree.map(lambda x: x.dtype, got["state"]) in (jax.tree.map(lambda x: x.dtype, fresh),
                                                              jax.tree.map(lambda x: x.dtype, alt["state"]))
    assert int(optax_tree_get(got["state"], "count")) == 3
    u, _ = tx.update(_legacy_grads(3), got["state"], got["params"])
    want = np.load(os.path.join(FIXTURES, f"legacy_{name}.npz"))
    for k in ("b", "w"):
        assert bits(got["params"][k] + u[k]) == bits(jnp.asarray(want[f"next_{k}"]))


def test_trainer_loads_a_file_from_before_the_count_rename():
    from gradxform.trainer import Trainer  # noqa: PLC0415
    t = Trainer(LEGACY_PARAMS, "adam", {"learning_rate": 0.05, "wd": 1e-3,
                                        "lr_scheduler": gradxform.lr_scheduler.FactorScheduler(2, 0.5)},
                devices=jax.devices()[:1], skip_nonfinite=True)
    t.load_states(os.path.join(FIXTURES, "legacy_trainer_adam.gxckpt"))
    t.update(_legacy_grads(3), 1)
    want = np.load(os.path.join(FIXTURES, "legacy_trainer_adam.npz"))
    for k in ("b", "w"):
        assert bits(t.params[k]) == bits(jnp.asarray(want[f"next_{k}"]))


def test_a_legacy_file_is_not_taken_for_another_tree(tmp_path):
    """The former names are tried only as a whole tree: a file of another optimizer stays a mismatch."""
    tx = gradxform.create("mxnet.sgd", learning_rate=0.1, momentum=0.9)
    like = {"params": LEGACY_PARAMS, "state": tx.init(LEGACY_PARAMS)}
    with pytest.raises(CheckpointError) as err:
        load_state(os.path.join(FIXTURES, "legacy_mxnet.adam.gxckpt"), like=like)
    assert err.value.kind == "mismatch"


class _AB(NamedTuple):
    a: jax.Array
    b: jax.Array


class _BA(NamedTuple):
    b: jax.Array
    a: jax.Array


def test_the_same_paths_in_another_order_are_a_mismatch_that_says_so(tmp_path):
    # a state class whose fields were reordered: every path is there, in another order
    gradxform.save_state(tmp_path / "s", _AB(jnp.zeros(2), jnp.ones(3)))
    with pytest.raises(gradxform.CheckpointError, match="the same paths in another order") as err:
        gradxform.load_state(tmp_path / "s", like=_BA(jnp.ones(3), jnp.zeros(2)))
    assert err.value.kind == "mismatch" and "missing []" in str(err.value)


def test_other_paths_are_not_called_another_order(tmp_path):
    gradxform.save_state(tmp_path / "s", {"a": jnp.zeros(2), "b": jnp.ones(3)})
    with pytest.raises(gradxform.CheckpointError, match=r"missing \['\['c'\]'\]|missing \[.*c") as err:
        gradxform.load_state(tmp_path / "s", like={"a": jnp.zeros(2), "b": jnp.ones(3), "c": jnp.ones(3)})
    assert "another order" not in str(err.value) and "per_leaf_counts" not in str(err.value)


class _ACount(NamedTuple):
    a: jax.Array
    count: jax.Array


def test_a_step_count_among_the_differing_paths_gets_the_per_leaf_counts_hint(tmp_path):
    gradxform.save_state(tmp_path / "s", _AB(jnp.zeros(2), jnp.ones(3)))
    with pytest.raises(gradxform.CheckpointError, match="per_leaf_counts"):
        gradxform.load_state(tmp_path / "s", like=_ACount(jnp.zeros(2), jnp.asarray(0, jnp.int32)))


def test_a_current_file_with_a_bool_leaf_where_int32_is_expected_is_a_mismatch(tmp_path):
    # only files from before the flag change (bool then, int32 0/1 now) are converted
    gradxform.save_state(tmp_path / "s", {"flag": jnp.asarray(True)})
    with pytest.raises(gradxform.CheckpointError, match="bool") as err:
        gradxform.load_state(tmp_path / "s", like={"flag": jnp.asarray(1, jnp.int32)})
    assert err.value.kind == "mismatch"


def test_a_state_loaded_into_an_optimizer_with_another_schedule_base_is_refused_until_told_which(tmp_path):
    # found by porting MindSpore's ResNet train.py: it resumes with a sliced lr list and
    # load_checkpoint(..., filter_prefix=['learning_rate', 'global_step']); loading the whole state
    # here brought the old list's base, which rescaled the new list (set_hyper's rule) silently
    import gradxform as gx
    old = gx.create("mindspore.momentum", learning_rate=[0.036, 0.03, 0.02, 0.01], momentum=0.9)
    new = gx.create("mindspore.momentum", learning_rate=[0.01, 0.005], momentum=0.9)
    params, grads = {"w": jnp.ones(3)}, {"w": jnp.ones(3)}
    save_state(tmp_path / "s.ckpt", old.init(params))
    with pytest.raises(CheckpointError, match=r"base learning_rate 0\.036 differs from this optimizer's 0\.01.*"
                                               r"schedule_base='optimizer'") as err:
        load_state(tmp_path / "s.ckpt", like=new.init(params))
    assert err.value.kind == "mismatch"
    kept = load_state(tmp_path / "s.ckpt", like=new.init(params), schedule_base="optimizer")
    fresh = new.update(grads, new.init(params), params)[0]["w"]
    np.testing.assert_array_equal(new.update(grads, kept, params)[0]["w"], fresh)  # the list as built
    saved = load_state(tmp_path / "s.ckpt", like=new.init(params), schedule_base="file")
    np.testing.assert_allclose(new.update(grads, saved, params)[0]["w"], np.asarray(fresh) * 3.6, rtol=1e-6)
    load_state(tmp_path / "s.ckpt", like=old.init(params))  # the same schedule: nothing to settle
    with pytest.raises(ValueError, match="schedule_base"):
        load_state(tmp_path / "s.ckpt", like=new.init(params), schedule_base="mine")


def test_a_file_with_the_former_one_element_placeholders_loads(tmp_path):
    """MindSpore AdaFactor's unused slots held a (1,) zero per leaf before issue 37 and hold nothing
    now (``placeholder_fields``): such a file loads, its zeros dropped; anything else there is corrupt."""
    from gradxform.mindspore._adafactor import AdaFactorState
    params = {"b": jnp.asarray([0.5, -1.0]), "w": jnp.ones((2, 3))}
    tx = gradxform.create("mindspore.adafactor", learning_rate=0.05, relative_step=False)
    state = tx.update(jax.tree.map(jnp.sin, params), tx.init(params), params)[1]

    def former(fill):  # the layout before: a (1,) array where a leaf's slot is unused
        def node(st):
            if not isinstance(st, AdaFactorState):
                return st
            spread = {f: {k: (jnp.full((1,), fill, jnp.float32) if isinstance(v, tuple) else v)
                          for k, v in getattr(st, f).items()} for f in AdaFactorState.placeholder_fields}
            return st._replace(**spread)
        return jax.tree.map(node, state, is_leaf=lambda x: isinstance(x, AdaFactorState))

    save_state(tmp_path / "old.gxckpt", former(0.0))
    loaded = load_state(tmp_path / "old.gxckpt", like=tx.init(params))
    assert jax.tree.structure(loaded) == jax.tree.structure(state)
    jax.tree.map(np.testing.assert_array_equal, loaded, state)
    save_state(tmp_path / "bad.gxckpt", former(3.0))
    with pytest.raises(CheckpointError, match=r"corrupt.*exp_avg_sq.*where the state keeps nothing"):
        load_state(tmp_path / "bad.gxckpt", like=tx.init(params))
