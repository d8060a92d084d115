"""Seeded fuzzing of gradxform.checkpoint: every mutated file is refused with a CheckpointError or
loads equal to the original. Forgeries recompute the checksums, so the header rules are what stops
them. ``pytest --slow`` runs thousands of mutations instead of a few hundred."""
import collections
import hashlib
import random
import struct
import time

import jax
import jax.numpy as jnp
import msgpack
import numpy as np
import pytest

from gradxform.checkpoint import CheckpointError, load_state, read_metadata, save_state

SEED = 20240611
META = {"optimizer": "mxnet.adam", "step": 3, "nested": {"x": [1, 2.5, None, True, b"\0"]}}


def fuzz_state():
    return {"a": jnp.arange(12, dtype=jnp.float32).reshape(3, 4) / 7,
            "b": jnp.full((3, 4), 0.25, jnp.float32),  # same shape as "a": swaps must not pass
            "c": jnp.arange(5, dtype=jnp.int32),
            "d": jnp.array([[1.5, -0.0, 3], [4, 5, 6]], jnp.bfloat16),
            "e": jnp.zeros((0, 3), jnp.float32),
            "k": jax.random.split(jax.random.key(7), 2),
            "s": jnp.float32(3.5),
            "u": np.arange(7, dtype=np.uint8)}


def bits(x):
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(x).tobytes(), str(np.asarray(x).dtype), np.shape(x)


def same(a, b):
    return (jax.tree.structure(a) == jax.tree.structure(b)
            and all(bits(x) == bits(y) and x.dtype == y.dtype for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))))


# -- building files ----------------------------------------------------------------------------

def split(data):
    hlen = struct.unpack_from("<Q", data, 8)[0]
    return msgpack.unpackb(data[32:32 + hlen], raw=False), data[64 + hlen:]


def assemble(raw_header: bytes, payload: bytes) -> bytes:
    """A file with every checksum and length field recomputed."""
    head = struct.pack("<8sQQ", b"GXCKPT\x00\x01", len(raw_header), 64 + len(raw_header) + len(payload))
    return head + hashlib.sha256(head).digest()[:8] + raw_header + hashlib.sha256(raw_header).digest() + payload


def forge(header, payload, *, rehash=False):
    if rehash:
        header = dict(header, payload_size=len(payload), payload_sha256=hashlib.sha256(payload).hexdigest())
    return assemble(msgpack.packb(header, use_bin_type=True), payload)


ODD = [None, True, False, 0, -1, 1.5, float("nan"), 2**63, 2**64 - 1, -2**63, "", "x", b"", b"\xff",
       [], [1], {}, {"a": 1}, msgpack.ExtType(5, b"xy"), msgpack.Timestamp(1, 2)]


def odd(rng, but=None):
    while True:
        v = rng.choice(ODD)
        if type(v) is not type(but):
            return v


# -- mutations: each (rng, data, header, payload) -> bytes ---------------------------------------

def m_bitflip(rng, data, header, payload):
    b = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    return bytes(b)


def m_truncate(rng, data, header, payload):
    return data[:rng.randrange(len(data))]


def m_insert(rng, data, header, payload):
    at = rng.randrange(len(data) + 1)
    return data[:at] + rng.randbytes(rng.randint(1, 16)) + data[at:]


def m_delete(rng, data, header, payload):
    at = rng.randrange(len(data))
    return data[:at] + data[at + rng.randint(1, 16):]


def m_raw_header_bytes(rng, data, header, payload):
    """Random edits to the msgpack bytes themselves, checksums recomputed."""
    raw = bytearray(msgpack.packb(header, use_bin_type=True))
    for _ in range(rng.randint(1, 4)):
        op, at = rng.randrange(3), rng.randrange(len(raw))
        if op == 0:
            raw[at] = rng.randrange(256)
        elif op == 1:
            raw.insert(at, rng.randrange(256))
        else:
            del raw[at]
    return assemble(bytes(raw), payload)


def _leaves(header):
    return [list(e) for e in header["leaves"]]


def m_swap_offsets(rng, data, header, payload):
    leaves = _leaves(header)
    i, j = rng.sample(range(len(leaves)), 2)
    leaves[i][3], leaves[j][3] = leaves[j][3], leaves[i][3]
    return forge(dict(header, leaves=leaves), payload)


def m_swap_entries(rng, data, header, payload):
    """Swapped whole entries (the layout is then out of order), or also the payload bytes (then the
    layout is valid, but the leaves are in another order than ``like``'s)."""
    leaves = _leaves(header)
    i, j = sorted(rng.sample(range(len(leaves)), 2))
    if rng.random() < 0.5:
        leaves[i], leaves[j] = leaves[j], leaves[i]
        return forge(dict(header, leaves=leaves), payload)
    chunks = [payload[o:o + n] for _, _, _, o, n in leaves]
    leaves[i], leaves[j] = leaves[j], leaves[i]
    chunks[i], chunks[j] = chunks[j], chunks[i]
    off = 0
    for e in leaves:
        e[3], off = off, off + e[4]
    return forge(dict(header, leaves=leaves), b"".join(chunks), rehash=True)


def m_nbytes(rng, data, header, payload):
    leaves = _leaves(header)
    i = rng.randrange(len(leaves))
    leaves[i][4] += rng.choice([-1, 1, -leaves[i][4], 4096, 2**63])
    return forge(dict(header, leaves=leaves), payload)


def m_offset(rng, data, header, payload):
    """Overlaps (an offset moved back) and gaps (moved on), with or without bytes in the gap."""
    leaves = _leaves(header)
    i = rng.randrange(len(leaves))
    if rng.random() < 0.5:
        leaves[i][3] += rng.choice([-1, 1, -leaves[i][3], len(payload), 2**64 - 1 - leaves[i][3]])
        return forge(dict(header, leaves=leaves), payload)
    gap = rng.randint(1, 8)
    at = leaves[i][3]
    for e in leaves[i:]:
        e[3] += gap
    return forge(dict(header, leaves=leaves), payload[:at] + bytes(gap) + payload[at:], rehash=True)


def m_payload_size(rng, data, header, payload):
    if rng.random() < 0.5:  # trailing bytes no leaf claims, the size and hash made to agree
        return forge(header, payload + rng.randbytes(rng.randint(1, 8)), rehash=True)
    return forge(dict(header, payload_size=header["payload_size"] + rng.choice([-1, 1])), payload)


DTYPES = ["float64", "float16", "int32", "uint32", "int64", "complex64", "bool", "object", "O", "<f4", "f4",
          "U8", "V4", "S4", "str", "float", "float32 ", "FLOAT32", "key<fry>", "key<nope>", "key<threefry2x32",
          "key<rbg>", "", "int4", "bfloat16"]


def m_dtype(rng, data, header, payload):
    leaves = _leaves(header)
    i = rng.randrange(len(leaves))
    leaves[i][2] = rng.choice(DTYPES) if rng.random() < 0.8 else odd(rng, "")
    return forge(dict(header, leaves=leaves), payload)


def m_shape(rng, data, header, payload):
    leaves = _leaves(header)
    i = rng.randrange(len(leaves))
    shape = list(leaves[i][1])
    choice = rng.randrange(7)
    if choice == 0 and shape:  # a negative or huge dim
        shape[rng.randrange(len(shape))] = rng.choice([-1, -2**63, 2**32, 2**63, 2**64 - 1])
    elif choice == 1:  # rank beyond the limit, same element count
        shape = [1] * 33 + shape
    elif choice == 2:  # an empty leaf whose other dims are huge (nbytes 0 still agrees)
        shape = [0, 2**62, 2**40]
        leaves[i][4] = 0
    elif choice == 3:  # another shape with the same element count (a relabelling: 'mismatch')
        shape = [int(np.prod(shape, dtype=np.int64))] if len(shape) != 1 else shape + [1]
    elif choice == 4 and shape:
        shape[rng.randrange(len(shape))] = odd(rng, 0)
    else:
        shape = odd(rng, [])
    leaves[i][1] = shape
    return forge(dict(header, leaves=leaves), payload)


def m_types(rng, data, header, payload):
    """A value of the wrong type at each level: the header, its fields, the leaf list, an entry and
    an entry's fields; missing, extra and duplicate keys and paths; meta too deep."""
    leaves = _leaves(header)
    i = rng.randrange(len(leaves))
    choice = rng.randrange(9)
    if choice == 0:
        forged = rng.choice([list(header.values()), 1, "header", None, b"x", [header]])
    elif choice == 1:
        key = rng.choice(list(header))
        forged = dict(header, **{key: odd(rng, header[key])})
    elif choice == 2:
        key = rng.choice(list(header))
        forged = {k: v for k, v in header.items() if k != key}
    elif choice == 3:
        forged = dict(header, **{rng.choice(["extra", "Format", "leaves "]): 1})
        forged[rng.choice([1, b"format", None])] = 1
    elif choice == 4:
        leaves[i] = rng.choice([dict(zip("psdon", leaves[i])), "x", None, leaves[i][:4], leaves[i] + [0],
                                tuple(leaves[i])])
        forged = dict(header, leaves=leaves)
    elif choice == 5:
        field = rng.randrange(5)
        leaves[i][field] = odd(rng, leaves[i][field])
        forged = dict(header, leaves=leaves)
    elif choice == 6:  # a duplicated path
        j = rng.choice([k for k in range(len(leaves)) if k != i])
        leaves[j][0] = leaves[i][0]
        forged = dict(header, leaves=leaves)
    elif choice == 7:
        deep = 1
        for _ in range(rng.choice([33, 40, 200])):
            deep = [deep]
        forged = dict(header, meta=dict(header["meta"], deep=deep))
    else:
        forged = dict(header, format=rng.choice([2, 0, "1", 1.0, True, None, [1]]),
                      payload_sha256=rng.choice([header["payload_sha256"], header["payload_sha256"].upper()]))
    return forge(forged, payload)


MUTATIONS = [m_bitflip, m_truncate, m_insert, m_delete, m_raw_header_bytes, m_swap_offsets, m_swap_entries,
             m_nbytes, m_offset, m_payload_size, m_dtype, m_shape, m_types]


def fuzz(tmp_path, count):
    """Outcomes per read ('like', 'flat', 'meta') and mutation; and anything but a CheckpointError."""
    state = fuzz_state()
    path = tmp_path / "orig.ckpt"
    save_state(path, state, meta=META)
    data = path.read_bytes()
    header, payload = split(data)
    flat = load_state(path)
    reads = {"like": (lambda f: load_state(f, like=state, meta={"optimizer": META["optimizer"]}),
                      lambda got: same(got, state)),
             "flat": (load_state, lambda got: same(got, flat)),
             "meta": (read_metadata, lambda got: got == META)}
    outcomes, others = collections.Counter(), []
    bad = tmp_path / "bad.ckpt"
    for n in range(count):
        mutate = MUTATIONS[n % len(MUTATIONS)]
        bad.write_bytes(mutate(random.Random(f"{SEED}-{n}"), data, header, payload))
        for name, (read, equal) in reads.items():
            try:
                got = read(bad)
            except CheckpointError as err:
                assert str(bad) in str(err)
                outcomes[name, err.kind, mutate.__name__] += 1
            except BaseException as err:  # noqa: BLE001 -- what the test is about
                others.append((n, mutate.__name__, name, repr(err)[:300]))
            else:
                outcomes[name, "equal" if equal(got) else "different", mutate.__name__] += 1
    assert same(state, fuzz_state())  # the caller's tree is untouched
    assert same(load_state(path, like=state), state)
    return outcomes, others


# A consistent relabelling (the leaves and their bytes in another order, or another shape or dtype of
# the same size, other meta or paths, as raw msgpack edits can also make) is a valid file: ``like``
# refuses it ('mismatch'), but ``like=None`` and read_metadata cannot tell it from a real one, so only
# they may see a 'different' value.
RELABEL = {"m_swap_entries", "m_shape", "m_dtype", "m_types", "m_raw_header_bytes"}


def check_outcomes(outcomes, others, count):
    assert not others, others[:10]
    assert sum(outcomes.values()) == 3 * count
    like = collections.Counter()
    for (read, outcome, mutation), k in outcomes.items():
        assert outcome != "different" or (read != "like" and mutation in RELABEL), (read, mutation)
        if read == "like":
            like[outcome] += k
    assert like["corrupt"] > count // 2 and like["truncated"] > 0 and like["mismatch"] > 0, like
    return like


def report(count, start, outcomes):
    by_read = collections.defaultdict(collections.Counter)
    for (read, outcome, _), k in outcomes.items():
        by_read[read][outcome] += k
    return (f"\n{count} mutations x 3 reads in {time.perf_counter() - start:.1f} s: "
            + "; ".join(f"{read}: {dict(c)}" for read, c in by_read.items()))


def test_fuzz_quick(tmp_path, capsys):
    start, count = time.perf_counter(), 650  # 50 of each mutation
    outcomes, others = fuzz(tmp_path, count)
    check_outcomes(outcomes, others, count)
    with capsys.disabled():
        print(report(count, start, outcomes))


@pytest.mark.slow
def test_fuzz_many(tmp_path, capsys):
    start, count = time.perf_counter(), 6500  # 500 of each
    outcomes, others = fuzz(tmp_path, count)
    check_outcomes(outcomes, others, count)
    with capsys.disabled():
        print(report(count, start, outcomes))


# -- each rule, with the message it gives ------------------------------------------------------

def _edit(i, field, value):
    def edit(header, payload):
        leaves = _leaves(header)
        leaves[i][field] = value(leaves) if callable(value) else value
        return forge(dict(header, leaves=leaves), payload)
    return edit


def _swap_offsets(header, payload):
    leaves = _leaves(header)
    leaves[0][3], leaves[1][3] = leaves[1][3], leaves[0][3]
    return forge(dict(header, leaves=leaves), payload)


def _deep_meta(header, payload):
    deep = []
    for _ in range(40):
        deep = [deep]
    return forge(dict(header, meta={"deep": deep}), payload)


FORGERIES = {  # name: (edit, kind, message)
    "swapped offsets": (_swap_offsets, "corrupt",
                        r"leaf \['a'\] \(leaves\[0\]\): offset 48, but the leaves before it end at byte 0 \(a gap\)"),
    "nbytes - 1": (_edit(2, 4, lambda leaves: leaves[2][4] - 1), "corrupt",
                   r"leaf \['c'\] \(leaves\[2\]\): nbytes is 19; int32\[5\] takes 5 x 4 = 20 bytes"),
    "overlap": (_edit(1, 3, 40), "corrupt", r"leaf \['b'\] .*offset 40, but the leaves before it end at byte 48 "
                                            r"\(an overlap\)"),
    "gap": (_edit(1, 3, 52), "corrupt", r"leaf \['b'\] .*offset 52.*\(a gap\)"),
    "dtype object": (_edit(3, 2, "object"), "corrupt", r"leaf \['d'\] .*dtype 'object' is not one checkpoints store"),
    "dtype not a str": (_edit(3, 2, 7), "corrupt", r"leaf \['d'\] .*dtype 7 is not one"),
    "same-size dtype": (_edit(0, 2, "int32"), "mismatch", r"leaf \['a'\] is int32\[3,4\] in the file; "
                                                          r"expected float32\[3,4\]"),
    "negative dim": (_edit(0, 1, [-1, 4]), "corrupt", r"leaf \['a'\] .*shape \[-1, 4\]; expected a list of at most 32"),
    "float dim": (_edit(0, 1, [3.0, 4]), "corrupt", r"leaf \['a'\] .*shape \[3.0, 4\]"),
    "rank 33": (_edit(0, 1, [1] * 31 + [3, 4]), "corrupt", r"leaf \['a'\] .*expected a list of at most 32"),
    "huge empty": (_edit(4, 1, [0, 2**62]), "corrupt", r"leaf \['e'\] .*would exceed 2\*\*48 bytes"),
    # each bound itself passes the header checks (and the leaf is then not ``like``'s), one past it does not
    "rank 32": (_edit(0, 1, [1] * 30 + [3, 4]), "mismatch", r"leaf \['a'\] is float32\[1,1,.*,3,4\] in the file"),
    "empty of 2**48 bytes": (_edit(4, 1, [0, 2**46]), "mismatch", r"leaf \['e'\] is float32\[0,70368744177664\]"),
    "empty of 2**48 + 4 bytes": (_edit(4, 1, [0, 2**46 + 1]), "corrupt", r"leaf \['e'\] .*would exceed 2\*\*48 bytes"),
    "entry too short": (_edit(2, slice(3, 5), []), "corrupt", r"leaves\[2\] is \[\"\['c'\]\", \[5\], 'int32'\]; "
                                                              r"expected \[path, shape, dtype, offset, nbytes\]"),
    "path not a str": (_edit(2, 0, 5), "corrupt", r"leaves\[2\] has path 5; expected a string"),
    "duplicate path": (_edit(1, 0, "['a']"), "corrupt", r"leaf \['a'\] \(leaves\[1\]\): a second leaf with this path"),
    "header a list": (lambda h, p: forge(list(h.values()), p), "corrupt", "the header is a list; expected a map"),
    "leaves a map": (lambda h, p: forge(dict(h, leaves={"x": 1}), p), "corrupt",
                     r"header\['leaves'\] is a dict; expected list"),
    "bool size": (lambda h, p: forge(dict(h, payload_size=True), p), "corrupt",
                  r"header\['payload_size'\] is a bool; expected int"),
    "missing key": (lambda h, p: forge({k: v for k, v in h.items() if k != "meta"}, p), "corrupt",
                    r"lacks keys \['meta'\]"),
    "trailing bytes": (lambda h, p: forge(h, p + b"1234", rehash=True), "corrupt",
                       r"the leaves take 155 bytes; header\['payload_size'\] says 159"),
    "format 2": (lambda h, p: forge(dict(h, format=2), p), "mismatch", "format version 2; this gradxform reads version 1"),
    "meta too deep": (_deep_meta, "corrupt", r"header\['meta'\] nested more than 32 deep"),
    # a forged value is shown bounded (reprlib, Lib/reprlib.py `repr_str`: maxstring 60 gives
    # repr[:28] + "..." + repr[-29:]; maxlevel 3 shows the fourth level of a list as "...")
    "dtype a long str": (_edit(3, 2, "x" * 200), "corrupt",
                         r"leaf \['d'\] .*dtype '" + "x" * 27 + r"\.\.\." + "x" * 28 + "' is not one"),
    "shape nested 4 deep": (_edit(0, 1, [[[[1]]]]), "corrupt",
                            r"leaf \['a'\] .*shape \[\[\[\[\.\.\.\]\]\]\]; expected"),
    "meta ext type": (lambda h, p: forge(dict(h, meta={"x": msgpack.ExtType(1, b"")}), p), "corrupt",
                      r"header\['meta'\] holds a ExtType"),
}


@pytest.mark.parametrize("name", list(FORGERIES))
def test_each_forgery_is_refused_naming_the_leaf(tmp_path, name):
    edit, kind, message = FORGERIES[name]
    state = fuzz_state()
    save_state(tmp_path / "orig.ckpt", state, meta=META)
    header, payload = split((tmp_path / "orig.ckpt").read_bytes())
    assert [e[3] for e in header["leaves"]] == [0, 48, 96, 116, 128, 128, 144, 148]  # what the messages say
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(edit(header, payload))
    with pytest.raises(CheckpointError, match=message) as err:
        load_state(bad, like=state)
    assert err.value.kind == kind
    if kind == "corrupt":  # the file itself is invalid, whoever reads it
        for read in (load_state, read_metadata):
            with pytest.raises(CheckpointError, match=message):
                read(bad)


def test_reordered_leaves_are_a_mismatch(tmp_path):
    """The leaves and their bytes swapped consistently: a valid file, but not ``like``'s tree."""
    state = fuzz_state()
    save_state(tmp_path / "orig.ckpt", state)
    header, payload = split((tmp_path / "orig.ckpt").read_bytes())
    (tmp_path / "bad.ckpt").write_bytes(m_swap_entries(_AlwaysPayload(), None, header, payload))
    with pytest.raises(CheckpointError, match="the same paths in another order") as err:
        load_state(tmp_path / "bad.ckpt", like=state)
    assert err.value.kind == "mismatch"
    assert same(load_state(tmp_path / "bad.ckpt"), load_state(tmp_path / "orig.ckpt"))  # path -> value holds


class _AlwaysPayload(random.Random):
    def random(self):
        return 0.9  # m_swap_entries: swap the payload bytes too

    def sample(self, population, k):
        return [0, 2]


def _header_past_the_end(header, payload):
    """The header length field made larger than the file (header + its checksum would end one byte
    past it), the prefix checksum recomputed."""
    raw = msgpack.packb(header, use_bin_type=True)
    head = struct.pack("<8sQQ", b"GXCKPT\x00\x01", len(raw) + len(payload) + 1, 64 + len(raw) + len(payload))
    return head + hashlib.sha256(head).digest()[:8] + raw + hashlib.sha256(raw).digest() + payload


def test_a_header_length_past_the_end_says_so(tmp_path):
    state = fuzz_state()
    save_state(tmp_path / "orig.ckpt", state)
    (tmp_path / "bad.ckpt").write_bytes(_header_past_the_end(*split((tmp_path / "orig.ckpt").read_bytes())))
    for read in (load_state, read_metadata):
        with pytest.raises(CheckpointError, match="the header length is larger than the file") as err:
            read(tmp_path / "bad.ckpt")
        assert err.value.kind == "corrupt"


@pytest.mark.parametrize("zeros, loads", [(70_000, True), (91_000, False)])
def test_the_header_bound_is_4x_the_file_plus_1_mib(tmp_path, zeros, loads):
    """The bound on what a header may take decoded (the module docstring: 4x the file's length +
    1 MiB), at each of its two terms. A meta list of n zeros is n bytes in the file and at least 16 n
    decoded: its 8-byte slot per item (sys.getsizeof([0] * n) is 56 + 8 n) and the 8 bytes the count
    gives every object for its slot (small ints are CPython's cached objects: nothing more). The
    rest of the header (8 leaves and their paths) counts about 5 KB. 70,000 zeros: over 1 MiB but
    under 4x the file + 1 MiB, so written and read; 91,000: over 4x the file + 1 MiB (under 5x),
    so neither written nor read."""
    state, meta = fuzz_state(), {"z": [0] * zeros}
    save_state(tmp_path / "orig.ckpt", state)
    header, payload = split((tmp_path / "orig.ckpt").read_bytes())
    (tmp_path / "forged.ckpt").write_bytes(forge(dict(header, meta=meta), payload))
    size = (tmp_path / "forged.ckpt").stat().st_size
    low, high = 16 * zeros, 16 * zeros + 20_000
    if loads:
        assert 2**20 + 4 < low and high < 4 * size + 2**20
        save_state(tmp_path / "z.ckpt", state, meta=meta)
        assert read_metadata(tmp_path / "z.ckpt") == meta
        assert same(load_state(tmp_path / "forged.ckpt", like=state, meta=meta), state)
        return
    assert 4 * size + 2**20 < low and high < 5 * size + 2**20
    with pytest.raises(ValueError, match="store fewer, larger leaves"):
        save_state(tmp_path / "z.ckpt", state, meta=meta)
    with pytest.raises(CheckpointError, match=r"would take more than .* decoded \(4x the file's length") as err:
        load_state(tmp_path / "forged.ckpt", like=state)
    assert err.value.kind == "corrupt" and not (tmp_path / "z.ckpt").exists()
