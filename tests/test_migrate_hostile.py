"""Hostile files, round 3 (issue 27): every reader's work and memory bounded by its input.

The corpus is generated from a seed: tuples nested past the limit and graphs
of shared tuples (DUP, memo) in every place a value can go (dict key, set and
frozenset item, Gluon state, optimizer attribute, dtype arguments, BUILD
state), opcodes repeated to amplify memory, forged checkpoint headers with
valid checksums, MindSpore files of many tags, and special files (a FIFO,
``/dev/zero``, a directory). Every case runs in one child process per batch
(a SIGSEGV or a hang fails the test instead of killing the run; the child
has an address-space limit), each under tracemalloc, and must end within
``SECONDS`` (+ ``PER_MIB`` a MiB) with the documented error (`MigrateError`, `CheckpointError`)
naming the file, having allocated at most the file's length (the copy the
reader reads) + 4x it + 1 MiB (the budget the README promises) + ``SLACK``
(the interpreter's own noise). Through ``Trainer.load_states`` the Trainer's
parameters and state are unchanged afterwards.

CI runs a few hundred cases; ``pytest --slow`` thousands, with 4 MB files.
"""
import hashlib
import json
import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SECONDS = 10.0       # per case, on a loaded 2-core machine; the slowest measured is well under 1 s
PER_MIB = 5.0        # more per MiB of file: a 4 MB amplifier runs ~10**6 opcodes under tracemalloc
SLACK = 384 << 10    # tracemalloc noise: the reader's code objects, caches, the child's bookkeeping
P4 = b"\x80\x04"


def glob4(module: str, name: str) -> bytes:
    m, n = module.encode(), name.encode()
    return b"\x8c" + bytes([len(m)]) + m + b"\x8c" + bytes([len(n)]) + n + b"\x93"


def text(s: str) -> bytes:
    e = s.encode()
    return b"\x8c" + bytes([len(e)]) + e


SGD = glob4("mxnet.optimizer", "SGD")


# -- values: bytes that push one hostile value ------------------------------------------------
def deep(depth: int, kind: int) -> bytes:
    """A tuple nested ``depth`` deep, built four ways."""
    if kind == 0:
        return b"N" + b"\x85" * depth                  # TUPLE1
    if kind == 1:
        return b"N" + b"N\x86" * depth                 # TUPLE2 (prev, None)
    if kind == 2:
        return b"(" * depth + b"N" + b"t" * depth      # MARK ... TUPLE
    return b"N" + b"KK\x87" * depth                    # TUPLE3 (prev, K, K)


def shared(k: int, kind: int) -> bytes:
    """A graph of ``k`` tuples, each holding the previous one twice (or three times):
    2**k (3**k) nodes when walked as a tree."""
    if kind == 0:
        return b"N" + b"2\x86" * k                     # DUP
    if kind == 1:
        return b"N" + b"q\x00h\x00\x86" * k            # BINPUT / BINGET
    if kind == 2:
        return b"N" + b"22\x87" * k                    # DUP DUP TUPLE3
    return b"N" + b"\x94h" + b"".join(bytes([i]) + b"h" + bytes([i]) + b"\x86\x94h" for i in range(k))[:-1]


PLACES = {  # (reader, bytes around the value V)
    "dict_key": ("paddle", lambda v: P4 + b"}" + v + b"Ns."),
    "dict_value": ("paddle", lambda v: P4 + b"}" + text("k") + v + b"s."),
    "set_item": ("gluon", lambda v: P4 + b"\x8f(" + v + b"\x90."),
    "frozenset_item": ("gluon", lambda v: P4 + b"(" + v + b"\x91."),
    "list_item": ("gluon", lambda v: P4 + b"]" + v + b"a."),
    "gluon_state": ("gluon", lambda v: P4 + b"}K\x00" + v + b"sN\x86."),
    "gluon_key": ("gluon", lambda v: P4 + b"}" + v + b"Ns" + b"N\x86."),
    "dtype_args": ("paddle", lambda v: P4 + glob4("numpy", "dtype") + v + b"\x85R."),
    "dtype_state": ("paddle", lambda v: P4 + glob4("numpy", "dtype") + text("f4") + b"\x85R" + v + b"b."),
    "record_build": ("gluon", lambda v: P4 + SGD + b")\x81" + v + b"b."),
    **{f"attr_{a}": ("gluon_full", (lambda a: lambda v: P4 + b"}K\x00Ns" + SGD + b")\x81}" + text(a) + v
                                    + b"sb\x86.")(a))
       for a in ("num_update", "begin_num_update", "_index_update_count", "idx2name", "lr_scheduler",
                 "multi_precision", "lr", "wd")},
    "count_key": ("gluon_full", lambda v: P4 + b"}K\x00Ns" + SGD + b")\x81}" + text("_index_update_count") + b"}"
                  + v + b"K\x01ssb\x86."),
}

# -- amplification: one opcode (or a few) repeated to fill the file ------------------------------
AMPLIFIERS = {
    "empty_list": (b"", b"]"), "empty_dict": (b"", b"}"), "empty_set": (b"", b"\x8f"),
    "empty_tuple": (b"", b")"), "none": (b"", b"N"), "mark": (b"", b"("), "dup": (b"N", b"2"),
    "memoize": (b"N", b"\x94"), "memo_get": (b"N\x94", b"h\x00"), "small_str": (b"", b"\x8c\x02ab"),
    "binint": (b"", b"J\x00\x00\x01\x00"), "float": (b"", b"G" + struct.pack(">d", 1.5)),
    "record": (SGD + b"\x94", b"h\x00)\x81"), "tuple1": (b"N", b"\x85"), "list_of": (b"N",  b"]"),
    "appends": (b"]N\x94(", b"h\x00"), "setitems": (b"}(", b"J\x00\x00\x01\x00N"),
    "additems": (b"\x8f(", b"J\x00\x00\x01\x00"), "empty_tuple_memo": (b")", b"\x94"),
}


def amplified(name: str, size: int) -> bytes:
    head, unit = AMPLIFIERS[name]
    return P4 + head + unit * max(1, (size - len(head)) // len(unit)) + b"."


# -- checkpoints with a forged header whose checksums are right ------------------------------------
def checkpoint_with_header(header: bytes) -> bytes:
    total = 32 + len(header) + 32
    head = struct.pack("<8sQQ", b"GXCKPT\x00\x01", len(header), total)
    return head + hashlib.sha256(head).digest()[:8] + header + hashlib.sha256(header).digest()


HEADERS = {
    "empty_arrays": lambda n: b"\xdd" + struct.pack(">I", n) + b"\x90" * n,
    "empty_maps": lambda n: b"\xdd" + struct.pack(">I", n) + b"\x80" * n,
    "small_strs": lambda n: b"\xdd" + struct.pack(">I", n // 3) + b"\xa2ab" * (n // 3),
    "big_ints": lambda n: b"\xdd" + struct.pack(">I", n // 9) + (b"\xcf" + b"\x01" * 8) * (n // 9),
    "nested_arrays": lambda n: b"\x91" * n + b"\xc0",
    "leaves_of_empties": lambda n: (b"\x86" + b"\xa6format\x01" + b"\xa6leaves\xdd" + struct.pack(">I", n // 13)
                                    + b"\x95\xa0\x90\xa7float32\x00\x00" * (n // 13)),
}


def mindspore_file(n: int, duplicate: bool) -> bytes:
    from gradxform.migrate._mindspore import _checkpoint_class  # noqa: PLC0415
    msg = _checkpoint_class()()
    for i in range(n):
        v = msg.value.add()
        v.tag = f"moment1.p{i if not (duplicate and i == n - 1) else 0}"
        v.tensor.tensor_type = "Float32"
        v.tensor.tensor_content = b"\x00" * 4
        v.tensor.dims.append(1)
    return msg.SerializeToString()


def corpus(seed: int, scale: int) -> list[tuple[str, str, bytes]]:
    """(id, reader, file bytes): ``scale`` 1 for CI, 10 under --slow."""
    rng = np.random.default_rng(seed)
    cases = []
    for place, (reader, wrap) in PLACES.items():
        for kind in range(4):
            for depth in [101, 1000, 20_000] + ([100_000, 10**6] if scale > 1 else []):
                cases.append((f"deep{kind}_{depth}_{place}", reader, wrap(deep(depth, kind))))
            for _ in range(2 * scale):
                k = int(rng.integers(20, 200))
                cases.append((f"shared{kind}_{k}_{place}", reader, wrap(shared(k, kind))))
    sizes = [64 << 10] if scale == 1 else [64 << 10, 1 << 20, 4 << 20]
    for name in AMPLIFIERS:
        for size in sizes:
            for reader in ("gluon", "paddle"):
                cases.append((f"amp_{name}_{size}_{reader}", reader, amplified(name, size)))
    for name, make in HEADERS.items():
        for size in sizes:
            cases.append((f"ckpt_{name}_{size}", "checkpoint", checkpoint_with_header(make(size))))
    if scale == 1:  # one 1 MiB file of each kind: the bound where the 1 MiB slack no longer hides it
        cases.append(("amp_empty_list_1MiB", "gluon", amplified("empty_list", 1 << 20)))
        cases.append(("ckpt_empty_arrays_1MiB", "checkpoint", checkpoint_with_header(HEADERS["empty_arrays"](1 << 20))))
    for _ in range(scale * 20):  # shared graphs and deep tuples spliced into random places of a real file
        data = open(os.path.join(HERE, "fixtures", "mxnet", "adam", "trainer.states"), "rb").read()
        i = int(rng.integers(2, len(data) - 1))
        v = shared(int(rng.integers(30, 100)), int(rng.integers(4))) if rng.integers(2) else \
            deep(int(rng.integers(101, 5000)), int(rng.integers(4)))
        cases.append((f"splice_{i}", "gluon", data[:i] + v + data[i:]))
    return cases


CHILD = textwrap.dedent(r"""
    import io, json, os, resource, sys, time, tracemalloc
    import numpy as np
    import jax.numpy as jnp
    import gradxform
    from gradxform.checkpoint import CheckpointError, load_state
    from gradxform.migrate import MigrateError, from_gluon_states, read_gluon_states, read_mindspore_checkpoint
    from gradxform.migrate import read_paddle_state_dict
    from gradxform.trainer import Trainer

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        vm = int(f.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (vm + (3 << 30), hard))  # 3 GiB above what the imports took
    params = {"w": jnp.zeros(2)}
    tx = gradxform.create("sgd")
    trainer = Trainer({"a": jnp.ones(3), "b": jnp.zeros(2)}, "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    READERS = {
        "paddle": lambda p: read_paddle_state_dict(p), "gluon": lambda p: read_gluon_states(p),
        "gluon_full": lambda p: from_gluon_states(p, params, tx), "checkpoint": lambda p: load_state(p),
        "mindspore": lambda p: read_mindspore_checkpoint(p), "trainer": lambda p: trainer.load_states(p),
    }
    import jax
    snapshot = [np.asarray(x).copy() for x in jax.tree.leaves((trainer.params, trainer.state))]
    for line in open(sys.argv[1]):
        case = json.loads(line)
        size = os.path.getsize(case["path"])
        tracemalloc.start()
        t = time.perf_counter()
        try:
            READERS[case["reader"]](case["path"])
            outcome, message = "loaded", ""
        except (MigrateError, CheckpointError) as err:
            outcome, message = type(err).__name__, str(err)
        except Exception as err:  # an undocumented exception: reported, the test fails
            outcome, message = "UNDOCUMENTED " + type(err).__name__, str(err)[:300]
        seconds = time.perf_counter() - t
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        unchanged = all(np.array_equal(a, np.asarray(b)) for a, b in
                        zip(snapshot, jax.tree.leaves((trainer.params, trainer.state))))
        print(json.dumps({"id": case["id"], "outcome": outcome, "message": message[:400], "seconds": seconds,
                          "peak": peak, "size": size, "unchanged": unchanged, "path": case["path"]}), flush=True)
""")


def run_corpus(tmp_path, cases, timeout):
    """Runs the cases in one child; returns its records (one per case, in order)."""
    listing = tmp_path / "cases.jsonl"
    with open(listing, "w") as f:
        for i, (cid, reader, data) in enumerate(cases):
            path = tmp_path / f"case{i}.bin"
            path.write_bytes(data)
            f.write(json.dumps({"id": cid, "reader": reader, "path": str(path)}) + "\n")
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(listing)], capture_output=True, text=True,
                          timeout=timeout, env=env)
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0:
        last = cases[len(records)][0] if len(records) < len(cases) else "?"
        pytest.fail(f"the child died (rc {proc.returncode}) at case {last}: {proc.stderr[-2000:]}")
    assert len(records) == len(cases)
    return records


def check(records, *, may_load=()):
    for r in records:
        bound = r["size"] + 4 * r["size"] + (1 << 20) + SLACK
        assert not r["outcome"].startswith("UNDOCUMENTED"), r
        assert r["outcome"] != "loaded" or r["id"].startswith(may_load), r
        assert r["seconds"] < SECONDS + PER_MIB * r["size"] / (1 << 20), r
        assert r["peak"] <= bound, (r["id"], r["peak"], bound)
        assert r["unchanged"], r
        if r["outcome"] != "loaded":
            assert r["path"] in r["message"], r  # the error names the file


def _scale(request) -> int:
    return 10 if request.config.getoption("--slow", default=False) else 1


def test_hostile_corpus_is_refused_within_time_and_memory(tmp_path, request):
    scale = _scale(request)
    cases = corpus(seed=27, scale=scale)
    records = run_corpus(tmp_path, cases, timeout=600 * scale)
    # a legal pickle may hold a deep or shared value where nothing hashes or walks it: only
    # the "dict_value"/"list_item" places (as data) and splices that land in an ignored spot load
    check(records, may_load=("splice_",))
    refused = sum(r["outcome"] != "loaded" for r in records)
    assert refused >= len(records) - 20 * scale


def test_special_files_are_refused_before_reading(tmp_path):
    """A FIFO (no writer: open() would block forever), /dev/zero (a read would never end) and a
    directory: every reader, load_state and Trainer.load_states refuse them at once, naming the file."""
    if not hasattr(os, "mkfifo") or not os.path.exists("/dev/zero"):
        pytest.skip("needs POSIX special files")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    listing = tmp_path / "cases.jsonl"
    n = 0
    with open(listing, "w") as f:
        for path in (str(fifo), "/dev/zero", str(tmp_path)):
            for reader in ("paddle", "gluon", "gluon_full", "mindspore", "checkpoint", "trainer"):
                f.write(json.dumps({"id": f"{reader}:{path}", "reader": reader, "path": path}) + "\n")
                n += 1
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(listing)], capture_output=True, text=True,
                          timeout=300, env=env)
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and len(records) == n, proc.stderr[-2000:]
    for r in records:
        assert r["outcome"] in ("MigrateError", "CheckpointError"), r
        assert "not a regular file" in r["message"] and r["path"] in r["message"], r
        assert r["seconds"] < SECONDS and r["unchanged"], r


@pytest.mark.parametrize("reader", ["gluon", "paddle", "mindspore"])
def test_paths_of_every_type_and_binary_files_are_read_alike(tmp_path, reader):
    """str, bytes, os.PathLike and an open binary file give the same result; a text-mode file and a
    non-path are refused with a message saying what to pass."""
    import pathlib  # noqa: PLC0415

    import gradxform.migrate as M  # noqa: PLC0415
    fn, path = {"gluon": (M.read_gluon_states, os.path.join(HERE, "fixtures", "mxnet", "adam", "trainer.states")),
                "paddle": (M.read_paddle_state_dict, os.path.join(HERE, "fixtures", "paddle", "opt_adadelta_default.pdopt")),
                "mindspore": (M.read_mindspore_checkpoint, str(tmp_path / "m.ckpt"))}[reader]
    if reader == "mindspore":
        pathlib.Path(path).write_bytes(mindspore_file(3, duplicate=False))
    want = fn(path)
    with open(path, "rb") as f:
        got = [fn(os.fsencode(path)), fn(pathlib.Path(path)), fn(f)]
    flat = lambda x: [np.asarray(a) for a in __import__("jax").tree.leaves(  # noqa: E731
        x if reader != "gluon" else x[0])]
    for g in got:
        assert len(flat(g)) == len(flat(want)) and all(np.array_equal(a, b) for a, b in zip(flat(g), flat(want)))
    with open(path) as f, pytest.raises(M.MigrateError, match=r"binary mode \('rb'\)"):
        fn(f)
    with pytest.raises(TypeError, match=r"expected a path \(str, bytes or os.PathLike\) or a binary file"):
        fn(3)


def test_mindspore_tags_are_checked_in_linear_time(monkeypatch):
    """30,000 tags (0.7 MB: no answer after 12 s when duplicates were checked in O(n**2)): refused by
    the budget at once; with the budget lifted (monkeypatched), the duplicate at the end is found
    within a few seconds, and 500 distinct tags load."""
    import io  # noqa: PLC0415
    import time  # noqa: PLC0415

    import gradxform.migrate._mindspore as ms  # noqa: PLC0415
    from gradxform.migrate import MigrateError, read_mindspore_checkpoint  # noqa: PLC0415
    data = mindspore_file(30_000, duplicate=True)
    t = time.perf_counter()
    with pytest.raises(MigrateError, match="size allows"):
        read_mindspore_checkpoint(io.BytesIO(data))
    assert time.perf_counter() - t < SECONDS
    monkeypatch.setattr(ms, "_ENTRY_BYTES", 0)
    monkeypatch.setattr(ms, "_BUDGET_SLACK", 1 << 30)
    t = time.perf_counter()
    with pytest.raises(MigrateError, match="'moment1.p0' appears twice"):
        read_mindspore_checkpoint(io.BytesIO(data))
    assert time.perf_counter() - t < SECONDS
    assert len(read_mindspore_checkpoint(io.BytesIO(mindspore_file(500, duplicate=False)))) == 500


@pytest.mark.parametrize("field, value, match", [
    ("last_lr", -0.5, r"last_lr is -0.5; a run only reaches values in \[0, inf\)"),
    ("last_lr", float("nan"), "last_lr is nan"),
    ("last_lr", (1.0,), "last_lr is .*expected a number"),
    ("best", float("inf"), "best is inf"),
    ("num_bad_epochs", -1, "num_bad_epochs is -1; a step count"),
    ("cooldown_counter", -3, "cooldown_counter is -3; a step count"),
    ("cooldown_counter", 2**31 - 1, "cooldown_counter is 2147483647"),
])
def test_paddle_plateau_values_are_checked_on_load(field, value, match):
    import jax.numpy as jnp  # noqa: PLC0415

    import gradxform  # noqa: PLC0415
    from gradxform.migrate import MigrateError, from_paddle_state_dict  # noqa: PLC0415
    from gradxform.schedules import PaddleReduceOnPlateau  # noqa: PLC0415
    tx = gradxform.create("paddle.sgd", learning_rate=PaddleReduceOnPlateau(learning_rate=0.1))
    good = {"last_epoch": 3, "last_lr": 0.05, "best": 1.0, "num_bad_epochs": 1, "cooldown_counter": 0}
    from_paddle_state_dict({"LR_Scheduler": good}, {"w": jnp.zeros(2)}, tx)
    with pytest.raises(MigrateError, match=match):
        from_paddle_state_dict({"LR_Scheduler": {**good, field: value}}, {"w": jnp.zeros(2)}, tx)


@pytest.mark.parametrize("value", [-1.0, 2.0, float("nan")])
def test_gluon_nadam_m_schedule_is_checked_on_load(value):
    """MXNet's m_schedule is a product of momenta in (0, 1): 1.0 at the start, less after, 0 once
    it underflows (float64 in MXNet after ~900 updates; `NadamState.domains`)."""
    import io  # noqa: PLC0415

    import test_migrate_gluon as gluon  # noqa: PLC0415
    from gradxform.migrate import MigrateError, from_gluon_states  # noqa: PLC0415
    z, meta = gluon.load("nadam")
    data = open(gluon.states_file("nadam", meta), "rb").read()
    i = data.index(b"m_schedule\x94G") + len(b"m_schedule\x94G")
    forged = data[:i] + struct.pack(">d", value) + data[i + 8:]
    params, tx = gluon.params_at(z, meta, meta["k"] - 1), gluon.make_tx(meta)
    from_gluon_states(io.BytesIO(data), params, tx)
    with pytest.raises(MigrateError, match=r"m_schedule is .*\[0, 1\]"):
        from_gluon_states(io.BytesIO(forged), params, tx)


def test_short_cuts_a_value_at_the_documented_limits():
    """``migrate._errors.short``: 60 characters, 6 items, 3 levels (its docstring; issue 28 mutants
    60 -> 61, 6 -> 7, 3 -> 4). The cut forms are `reprlib`'s (Python's Lib/reprlib.py)."""
    from gradxform.migrate._errors import short  # noqa: PLC0415
    assert short("a" * 1000) == "'" + "a" * 27 + "..." + "a" * 28 + "'"  # 60 characters in all
    assert len(short(b"x" * 1000)) == 60  # an object's own repr (maxother)
    assert short(list(range(7))) == "[0, 1, 2, 3, 4, 5, ...]"
    assert short({i: i for i in range(7)}) == "{0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5, ...}"
    assert short([[[[1]]]]) == "[[[[...]]]]" and short([[[1]]]) == "[[[1]]]"
    graph = ()
    for _ in range(64):  # shared nodes: a full repr would take 2**64 steps
        graph = (graph, graph)
    assert short(graph) == "((((...), (...)), ((...), (...))), (((...), (...)), ((...), (...))))"
