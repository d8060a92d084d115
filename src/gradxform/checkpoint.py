"""Atomic, checksummed save and load of pytrees (optimizer states, parameters).

``save_state(path, tree)`` writes one file; ``load_state(path, like=tree)``
reads it back bit for bit into ``like``'s structure. The Trainer's
``save_states``/``load_states`` use this format.

File layout (all integers little-endian)::

    offset 0   8 bytes   magic  b"GXCKPT\\x00\\x01"
           8   8 bytes   uint64 header length H
          16   8 bytes   uint64 total file length
          24   8 bytes   first 8 bytes of SHA-256(bytes 0..24)   (guards the three fields above)
          32   H bytes   header: msgpack map
        32+H  32 bytes   SHA-256(header)
        64+H   ...       payload: every leaf's raw bytes (C order), in flatten order

The header is a map with exactly these keys: ``format`` (int, the version,
now 1), ``leaves`` (a list of one ``[path, shape, dtype, offset, nbytes]``
per leaf, in flatten order; path is `jax.tree_util.keystr`), ``treedef``
(its string, for messages), ``payload_size`` (int), ``payload_sha256``
(64 lowercase hex digits) and ``meta`` (the user's map).

Writing is atomic: the bytes go to a temporary file ``.<name>.XXXXXXXX.tmp``
(``.gx-XXXXXXXX.tmp`` where ``name`` is too long for that: any name the
filesystem accepts can be written) in the same directory, given the mode a
new file gets under the umask (an overwritten file keeps its own), which is flushed and fsync'ed, then `os.replace`d
over ``path`` (and the directory fsync'ed). A process killed mid-write leaves
the old file intact, and at worst such a stray temporary file, which the next
save to ``path`` removes (see `gradxform._files.remove_stray_temps` for when a temporary file
counts as stray).

Reading refuses anything but a regular file before reading it (a FIFO would
block, ``/dev/zero`` never end: `gradxform._files.read_regular`), then checks,
in order, and raises `CheckpointError` with ``kind``:
``'truncated'`` (the file is shorter than it says it is), ``'corrupt'`` (bad
magic, a checksum that does not match, a header that would take more than 4x
the file's length + 1 MiB decoded (counted on its bytes before decoding,
`gradxform._msgpack_cost`; `save_state` refuses to write such a file), an unreadable or
invalid header, trailing bytes, not a regular file) or ``'mismatch'`` (another format version, or a valid file
whose paths, shapes, dtypes or metadata differ from what the caller expects).
The header is valid when every value has the type above and, for leaf ``i``:

* ``path`` is a string, no two leaves share one;
* ``shape`` is a list of at most ``_MAX_RANK`` (32) ints, each ``>= 0``, and
  ``prod(non-zero dims) * itemsize <= _MAX_LEAF_BYTES`` (2**48), so that even an
  empty leaf has a shape NumPy and XLA can build;
* ``dtype`` is a name in the allow-list ``_ITEMSIZE`` (bool, (u)int8..64,
  float16/bfloat16/float32/float64, complex64/128, the float8 and int4 types
  of ml_dtypes, and typed PRNG keys ``key<impl>`` stored as uint32 words);
* ``nbytes == prod(shape) * itemsize(dtype)``;
* ``offset == offset[i-1] + nbytes[i-1]`` (0 for the first leaf): in order, no
  gap, no overlap; and the last leaf ends at ``payload_size``, which equals
  the payload's length, so every payload byte belongs to exactly one leaf;
* ``meta`` holds only None, bool, int, float, str, bytes, lists and maps,
  nested at most ``_MAX_META_DEPTH`` (32) deep.

Every failure, whatever the bytes on disk, is a `CheckpointError` naming the
leaf and what is wrong. Nothing is returned, and so nothing in memory changes,
unless every check passed.
"""
from __future__ import annotations

import errno
import hashlib
import math
import os
import re
import reprlib
import struct
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from ._domains import domain_error
from ._group_values import expand_groups, regroup_like
from ._files import create_locked_temp, new_file_mode, path_of, read_regular, remove_stray_temps
from ._msgpack_cost import decoded_cost as _header_cost
from ._hyper import settle_schedule_bases
from ._state_paths import former_names, hyper_difference, state_paths
from ._group_hyper import group_difference, group_hyper_plan
from ._state_v1 import v1_plan, v1_stack

__all__ = ["CheckpointError", "save_state", "load_state", "read_metadata", "FORMAT_VERSION"]

FORMAT_VERSION = 1
MAGIC = b"GXCKPT\x00\x01"
_PREFIX = struct.Struct("<8sQQ8s")  # magic, header length, file length, prefix checksum
_SHA = 32
_CHUNK = 1 << 22
_MAX_RANK = 32
_MAX_LEAF_BYTES = 1 << 48
_MAX_META_DEPTH = 32
_HEADER_TYPES = {"format": int, "leaves": list, "treedef": str, "payload_size": int,
                 "payload_sha256": str, "meta": dict}
_NUMERIC = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
            "float16", "bfloat16", "float32", "float64", "complex64", "complex128", "int4", "uint4",
            "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz")
_KEY_WORDS = {"threefry2x32": 2, "rbg": 4, "unsafe_rbg": 4}  # uint32 words per typed PRNG key


def _itemsizes() -> dict:
    sizes = {}
    for name in _NUMERIC:
        try:
            sizes[name] = np.dtype(jnp.dtype(name)).itemsize
        except TypeError:  # pragma: no cover - an ml_dtypes without this type
            pass
    sizes.update({f"key<{impl}>": 4 * words for impl, words in _KEY_WORDS.items()})
    return sizes


_ITEMSIZE = _itemsizes()  # the dtype allow-list: name -> bytes per element
_REPR = reprlib.Repr()  # bounded repr of anything a forged header holds (depth, length)
_REPR.maxstring = _REPR.maxother = 60
_REPR.maxlevel = 3
_short = _REPR.repr


class CheckpointError(ValueError):
    """A checkpoint file that cannot be loaded. ``kind`` is 'truncated',
    'corrupt' or 'mismatch'; ``path`` is the file."""

    KINDS = ("truncated", "corrupt", "mismatch")

    def __init__(self, kind: str, path, message: str):
        assert kind in self.KINDS, kind
        self.kind = kind
        self.path = os.fsdecode(path)
        super().__init__(f"{kind} checkpoint {self.path!r}: {message}")


def _msgpack():
    # Imported on first use: `import gradxform` must not need msgpack.
    try:
        import msgpack  # noqa: PLC0415
    except ImportError:  # pragma: no cover - msgpack is installed wherever checkpoints are used
        raise ImportError("gradxform.checkpoint needs msgpack: pip install msgpack") from None
    return msgpack


# -- leaves <-> bytes -------------------------------------------------------------

def _is_key(x) -> bool:
    dtype = getattr(x, "dtype", None)
    return dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key)


def _leaf_dtype_name(x) -> str:
    if _is_key(x):
        return f"key<{x.dtype._impl.name}>"
    return str(np.dtype(getattr(x, "dtype", None) or np.asarray(x).dtype))


def _to_host(x) -> np.ndarray:
    """The leaf's bytes as a flat uint8 array (works for bfloat16 and keys)."""
    if _is_key(x):
        x = jax.random.key_data(x)
    return np.ascontiguousarray(np.asarray(x)).reshape(-1).view(np.uint8)


def _leaf_shape(x) -> tuple:
    return tuple(int(d) for d in np.shape(x))


def _from_bytes(buf: memoryview, dtype_name: str, shape: tuple, like_leaf):
    if dtype_name.startswith("key<"):
        impl = dtype_name[4:-1]
        data = np.frombuffer(buf, np.uint32).reshape(shape + (_KEY_WORDS[impl],)).copy()
        return jax.random.wrap_key_data(jnp.asarray(data), impl=impl)
    value = np.frombuffer(buf, jnp.dtype(dtype_name)).reshape(shape).copy()
    return _placed(value, like_leaf)


def _placed(value, like_leaf):
    """A host value put where ``like_leaf`` lives (its sharding; NumPy stays NumPy)."""
    if not isinstance(value, np.ndarray) or isinstance(like_leaf, np.ndarray) or like_leaf is None:
        return value  # a PRNG key is built on the device already
    sharding = getattr(like_leaf, "sharding", None)
    if sharding is not None:
        return jax.device_put(value, sharding)
    return jnp.asarray(value)


_FLAG = ("bool", "int32")  # (dtype in a file from before the rename, dtype now) of a state flag


def _as_flag(x):
    return x.astype(np.int32) if isinstance(x, np.ndarray) else jax.device_put(x.astype(jnp.int32), x.sharding)


def _describe(tree) -> tuple[list, Any, list]:
    flat, treedef = jax.tree_util.tree_flatten_with_path(tree)
    paths = [jax.tree_util.keystr(p) for p, _ in flat]
    return paths, treedef, [leaf for _, leaf in flat]


def _plain_error(obj) -> str | None:
    """Why ``obj`` is not a plain meta value (see the module docstring), or None."""
    stack = [(obj, 0)]
    while stack:
        x, depth = stack.pop()
        if depth > _MAX_META_DEPTH:
            return f"nested more than {_MAX_META_DEPTH} deep"
        if isinstance(x, dict):
            stack.extend((v, depth + 1) for v in list(x) + list(x.values()))
        elif isinstance(x, list):
            stack.extend((v, depth + 1) for v in x)
        elif x is not None and type(x) not in (bool, int, float, str, bytes):
            return f"holds a {type(x).__name__} ({_short(x)})"
    return None


def _msgpack_safe(obj):
    """Meta values: only msgpack-native types, so a file never needs pickle."""
    try:
        packed = _msgpack().packb(obj, use_bin_type=True)
        out = _msgpack().unpackb(packed, raw=False, strict_map_key=False)
    except (TypeError, ValueError) as err:
        out, why = None, str(err)
    else:
        why = _plain_error(out)
    if why is not None:
        raise TypeError(f"save_state(meta=...): meta must hold only numbers, strings, bools, None, "
                        f"lists and dicts, nested at most {_MAX_META_DEPTH} deep; {why}.") from None
    return out


# -- writing ------------------------------------------------------------------------

def save_state(path, state, *, meta: dict | None = None) -> None:
    """Writes the pytree ``state`` to ``path`` atomically (see the module docstring).

    Every leaf is stored with its exact bytes, shape and dtype (bfloat16 and
    typed PRNG keys included), so `load_state` gives it back bit for bit.
    ``meta`` is a small dict of plain values kept in the header (the Trainer
    stores the optimizer's name there). Stray temporary files of ``path``
    left by killed writers are removed first.

    Raises:
      TypeError: a leaf whose dtype is not in the allow-list (named with its
        path), or a ``meta`` that is not plain data.
    """
    if hasattr(path, "write") or hasattr(path, "read"):
        raise TypeError("save_state: writes atomically (a temporary file renamed over the path), so it needs a "
                        f"path (str, bytes or os.PathLike), not an open file ({type(path).__name__}).")
    path = path_of(path, "save_state")
    paths, treedef, leaves = _describe(expand_groups(state))  # multipliers per leaf: files keep one form
    entries, offset, sha, hosts = [], 0, hashlib.sha256(), []
    for p, x in zip(paths, leaves):
        dtype, shape = _leaf_dtype_name(x), _leaf_shape(x)
        if dtype not in _ITEMSIZE:
            raise TypeError(f"save_state: leaf {p} has dtype {dtype}, which checkpoints do not store; "
                            f"they store {', '.join(_ITEMSIZE)}.")
        if len(shape) > _MAX_RANK:
            raise TypeError(f"save_state: leaf {p} has rank {len(shape)}; checkpoints store at most "
                            f"{_MAX_RANK}.")
        h = _to_host(x)
        hosts.append(h)
        entries.append([p, list(shape), dtype, offset, h.nbytes])
        offset += h.nbytes
        sha.update(h)  # pyright: ignore[reportArgumentType]  # a buffer (NumPy's stubs: only on 3.12+)
    header = cast(bytes, _msgpack().packb({  # msgpack.packb: bytes (None only from a Packer without autoreset)
        "format": FORMAT_VERSION, "leaves": entries, "treedef": str(treedef),
        "payload_size": offset, "payload_sha256": sha.hexdigest(),
        "meta": _msgpack_safe(meta or {}),
    }, use_bin_type=True))
    total = _PREFIX.size + len(header) + _SHA + offset
    if _header_cost(header, _header_limit(total)) is None:  # what load_state would refuse
        raise ValueError(f"save_state: {len(entries)} leaves of {offset} bytes in all: the header describing "
                         f"them would take more than {_header_limit(total)} bytes to read back (4x the file + "
                         "1 MiB, the bound load_state holds any file to); store fewer, larger leaves "
                         "(e.g. stack scalars into one array).")
    head = struct.pack("<8sQQ", MAGIC, len(header), total)
    prefix = head + hashlib.sha256(head).digest()[:8]

    directory, base = os.path.dirname(os.path.abspath(path)), os.path.basename(path)
    if not os.path.isdir(directory):  # else mkstemp's error names the temporary file, not the user's path
        raise FileNotFoundError(errno.ENOENT, f"save_state: cannot write {os.fspath(path)!r}: the folder "
                                f"{os.path.dirname(os.fspath(path)) or '.'!r} does not exist (os.makedirs(folder, "
                                "exist_ok=True) creates it)", os.fspath(path))
    remove_stray_temps(directory, base)
    fd, tmp = create_locked_temp(directory, base)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(prefix)
            f.write(header)
            f.write(hashlib.sha256(header).digest())
            for h in hosts:
                for start in range(0, h.nbytes, _CHUNK):
                    f.write(h[start:start + _CHUNK])
            f.flush()
            if hasattr(os, "fchmod"):  # the mode of a new file (or the overwritten one's), not mkstemp's 0600
                os.fchmod(f.fileno(), new_file_mode(path))
            os.fsync(f.fileno())
            os.replace(tmp, path)  # before closing: the lock is held until the name is gone
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:  # make the rename itself durable
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


# -- reading ------------------------------------------------------------------------

def _check_header(path, header, payload_len: int) -> list:
    """The header's leaves as (path, shape, dtype, offset, nbytes) tuples, once
    every rule of the module docstring holds; else a `CheckpointError`."""
    def corrupt(message):
        return CheckpointError("corrupt", path, message)

    if not isinstance(header, dict):
        raise corrupt(f"the header is a {type(header).__name__}; expected a map.")
    fmt = header.get("format", FORMAT_VERSION)  # a missing one is corrupt, below
    if type(fmt) is not int or fmt != FORMAT_VERSION:
        raise CheckpointError("mismatch", path, f"format version {_short(fmt)}; this gradxform reads "
                                                f"version {FORMAT_VERSION}.")
    missing = [k for k in _HEADER_TYPES if k not in header]
    extra = [_short(k) for k in header if k not in _HEADER_TYPES]
    if missing or extra:
        raise corrupt(f"the header lacks keys {missing} and has unknown keys {extra[:4]}.")
    for key, want in _HEADER_TYPES.items():
        if type(header[key]) is not want:
            raise corrupt(f"header[{key!r}] is a {type(header[key]).__name__}; expected {want.__name__}.")
    if not re.fullmatch(r"[0-9a-f]{64}", header["payload_sha256"]):
        raise corrupt(f"header['payload_sha256'] is {_short(header['payload_sha256'])}; expected 64 hex digits.")
    why = _plain_error(header["meta"])
    if why is not None:
        raise corrupt(f"header['meta'] {why}.")

    out, offset, seen = [], 0, set()
    for i, entry in enumerate(header["leaves"]):
        if type(entry) is not list or len(entry) != 5:
            raise corrupt(f"leaves[{i}] is {_short(entry)}; expected [path, shape, dtype, offset, nbytes].")
        p, shape, dtype, off, n = entry
        if type(p) is not str:
            raise corrupt(f"leaves[{i}] has path {_short(p)}; expected a string.")
        leaf = f"leaf {_short(p)[1:-1]} (leaves[{i}])"
        if p in seen:
            raise corrupt(f"{leaf}: a second leaf with this path.")
        seen.add(p)
        if (type(shape) is not list or len(shape) > _MAX_RANK
                or any(type(d) is not int or d < 0 for d in shape)):
            raise corrupt(f"{leaf}: shape {_short(shape)}; expected a list of at most {_MAX_RANK} "
                          f"non-negative ints.")
        if type(dtype) is not str or dtype not in _ITEMSIZE:
            raise corrupt(f"{leaf}: dtype {_short(dtype)} is not one checkpoints store "
                          f"({', '.join(_ITEMSIZE)}).")
        itemsize = _ITEMSIZE[dtype]
        if math.prod(d for d in shape if d) * itemsize > _MAX_LEAF_BYTES:
            raise corrupt(f"{leaf}: shape {_short(shape)} of {dtype} would exceed 2**48 bytes.")
        if type(off) is not int or type(n) is not int:
            raise corrupt(f"{leaf}: offset {_short(off)} and nbytes {_short(n)}; expected ints.")
        want = math.prod(shape) * itemsize
        if n != want:
            raise corrupt(f"{leaf}: nbytes is {n}; {_fmt(shape, dtype)} takes {math.prod(shape)} x "
                          f"{itemsize} = {want} bytes.")
        if off != offset:
            raise corrupt(f"{leaf}: offset {off}, but the leaves before it end at byte {offset} "
                          f"({'a gap' if off > offset else 'an overlap'}).")
        offset += n
        out.append((p, tuple(shape), dtype, off, n))
    size = header["payload_size"]
    if offset != size:
        raise corrupt(f"the leaves take {offset} bytes; header['payload_size'] says {size}.")
    if size != payload_len:
        raise corrupt(f"the payload size disagrees with the header ({payload_len} bytes; "
                      f"header['payload_size'] says {size}).")
    return out


_HEADER_FACTOR, _HEADER_SLACK = 4, 1 << 20


def _header_limit(file_len: int) -> int:
    """What decoding a checkpoint's header may allocate: 4x the file's length + 1 MiB."""
    return _HEADER_FACTOR * file_len + _HEADER_SLACK


def _read(path) -> tuple[dict, list, memoryview, str]:
    """Returns (header, leaves, payload, the file's label) after every integrity check."""
    data, path = read_regular(path, "load_state", lambda label, why: CheckpointError("corrupt", label, why))
    if len(data) < _PREFIX.size:
        if not MAGIC.startswith(data[:len(MAGIC)]):
            raise CheckpointError("corrupt", path, "not a gradxform checkpoint (bad magic bytes).")
        raise CheckpointError("truncated", path, f"only {len(data)} bytes; the fixed prefix alone "
                                                 f"is {_PREFIX.size}.")
    magic, hlen, total, check = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise CheckpointError("corrupt", path, "not a gradxform checkpoint (bad magic bytes).")
    if hashlib.sha256(data[:24]).digest()[:8] != check:
        raise CheckpointError("corrupt", path, "the length fields fail their checksum.")
    if len(data) < total:
        raise CheckpointError("truncated", path, f"{len(data)} bytes of the {total} it was written with.")
    if len(data) > total:
        raise CheckpointError("corrupt", path, f"{len(data) - total} unexpected bytes after the end.")
    hstart, hend = _PREFIX.size, _PREFIX.size + hlen
    if hend + _SHA > total:
        raise CheckpointError("corrupt", path, "the header length is larger than the file.")
    raw = data[hstart:hend]
    if hashlib.sha256(raw).digest() != data[hend:hend + _SHA]:
        raise CheckpointError("corrupt", path, "the header fails its SHA-256 checksum.")
    limit = _header_limit(len(data))
    if _header_cost(raw, limit) is None:
        raise CheckpointError("corrupt", path, f"the header ({hlen} bytes) would take more than {limit} bytes "
                                               f"decoded ({_HEADER_FACTOR}x the file's length + 1 MiB); a "
                                               "header of a few objects per leaf never does.")
    try:
        header = _msgpack().unpackb(raw, raw=False, strict_map_key=False)
    except Exception as err:  # noqa: BLE001 -- any decoding failure is corruption
        raise CheckpointError("corrupt", path, f"the header cannot be decoded ({_short(err)}).") from None
    payload = memoryview(data)[hend + _SHA:]
    leaves = _check_header(path, header, len(payload))
    if hashlib.sha256(payload).hexdigest() != header["payload_sha256"]:
        raise CheckpointError("corrupt", path, "the payload fails its SHA-256 checksum.")
    return header, leaves, payload, path


def read_metadata(path) -> dict:
    """The ``meta`` map of a checkpoint (after every integrity check)."""
    return _read(path)[0]["meta"]


def _fmt(shape, dtype) -> str:
    return f"{dtype}[{','.join(str(d) for d in shape)}]"


def _without_placeholders(entries: list, payload, like, path) -> list:
    """``entries`` less those a state class's ``placeholder_fields`` no longer
    hold: a file written before such a field left its unused leaves empty
    has a (1,) zero there (MindSpore AdaFactor's unused slots), which is
    dropped; anything else there is 'corrupt'."""
    prefixes = tuple(f"{jax.tree_util.keystr(p)}.{f}{sep}" for p, node in state_paths(like)
                     for f in getattr(type(node), "placeholder_fields", ()) for sep in ("[", "."))
    if not prefixes:
        return entries
    wanted = set(_describe(like)[0])
    kept = []
    for entry in entries:
        p, shape, dtype, offset, nbytes = entry
        if p in wanted or not p.startswith(prefixes):
            kept.append(entry)
            continue
        value = _from_bytes(payload[offset:offset + nbytes], dtype, shape, None)
        if tuple(shape) != (1,) or np.any(np.asarray(value) != 0):
            raise CheckpointError("corrupt", path, f"{p} holds {_fmt(shape, dtype)} where the state keeps "
                                                   "nothing (files written before keep a (1,) zero there).")
    return kept


def load_state(path, like=None, *, meta: dict | None = None, alternatives=(), schedule_base: str | None = None):
    """Reads a file written by `save_state`.

    Args:
      path: the file: a path (str, bytes or os.PathLike) or an open binary
        file. Anything but a regular file (a FIFO, a device, a directory) is
        refused before a byte is read.
      like: a pytree with the expected structure (arrays, or
        `jax.ShapeDtypeStruct`s as from `jax.eval_shape`); the result has
        its structure, and each leaf goes where ``like``'s leaf lives (its
        sharding, or NumPy for a NumPy leaf). With ``like=None`` the result
        is a dict ``{keystr path: array}``.
      meta: expected metadata; each key given must equal the file's value.
      alternatives: other trees the file may hold instead of ``like`` (e.g.
        an optimizer state with step counts per leaf or shared,
        `gradxform.per_leaf_counts`): the first whose paths are the file's is used.
        A file written before state fields were renamed (its paths are
        ``like``'s or an alternative's with the former names, `former_names`:
        ``StepState.num_update`` and ``.count``, now ``.count`` and
        ``.leaf_counts``) loads too, its bool flags as the int32 0/1 that
        state now holds.
      schedule_base: where a scheduled learning rate's base differs between the
        file and ``like`` (another schedule, or a ``set_hyper``), which holds:
        ``'optimizer'`` or ``'file'``; None refuses ('mismatch'), naming both.

    Returns: the tree, bit-identical to what was saved (but a base ``schedule_base`` replaced).

    Raises:
      CheckpointError: 'truncated', 'corrupt' (also: an optimizer state in
        the tree holds a value outside the domain its class declares, e.g. a
        negative second moment, `gradxform._domains`; the message names the
        field, the leaf and the value) or 'mismatch' (paths, shapes, dtypes
        or meta differ from ``like``/``meta``); nothing is returned.
    """
    header, entries, payload, path = _read(path)
    file_meta = header["meta"]
    for key, want in (meta or {}).items():
        got = file_meta.get(key)
        if got != _msgpack_safe(want):
            raise CheckpointError("mismatch", path, f"meta[{key!r}] is {_short(got)} in the file; "
                                                    f"expected {_short(want)}.")
    if like is None:
        return {p: _from_bytes(payload[o:o + n], d, s, None) for p, s, d, o, n in entries}
    grouped = (like, *alternatives)  # read per leaf, as saved (`expand_groups`), then grouped again
    like, alternatives = expand_groups(like), [expand_groups(a) for a in alternatives]
    paths, treedef, leaves = _describe(like)
    entries = _without_placeholders(entries, payload, like, path)
    file_paths = [e[0] for e in entries]
    for other in alternatives:
        if file_paths == paths:
            break
        described = _describe(other)
        if described[0] == file_paths:
            paths, treedef, leaves = described
    former = False  # the file names renamed fields as before the rename: same leaves, same order
    for form in (like, *alternatives):
        if file_paths == paths:
            break
        renamed = former_names(form)
        if renamed is not None and _describe(renamed)[0] == file_paths:
            former, (_, treedef, leaves) = True, _describe(form)
            paths = file_paths
    plan = None  # a file of the v1 layout: per-leaf fields as one entry per leaf (`_state_v1`)
    for form, named in ((f, n) for f in (like, *alternatives) for n in (f, former_names(f)) if n is not None):
        plan = v1_plan(file_paths, _describe(named)[0], named) if file_paths != paths else None
        if plan is None and file_paths != paths:  # per-group hyperparameters as scalars (`_group_hyper`)
            plan = group_hyper_plan(file_paths, named, v1_plan)
        if plan is not None:
            (_, treedef, leaves), former = _describe(form), former or named is not form
            paths = file_paths = _describe(named)[0]
            break
    if file_paths != paths:
        missing = [p for p in paths if p not in file_paths]
        extra = [_short(p) for p in file_paths if p not in paths]
        order = "" if missing or extra else " the same paths in another order;"
        if any(".count" in p or ".leaf_counts" in p for p in missing + extra):
            order += (" (step counts are shared in a fresh state and per leaf after a masked step: pass "
                      "alternatives=[gradxform.per_leaf_counts(state, params)]);")
        groups = group_difference(file_paths, like)
        if groups:  # parameter groups that set other values of their own
            raise CheckpointError("mismatch", path, f"the file was written by an optimizer whose parameter groups "
                                                    f"set other hyperparameters of their own ({groups}); build the "
                                                    "optimizer with the saved run's groups, then load.")
        differ = hyper_difference(missing, [p for p in file_paths if p not in paths])
        if differ:  # an optimizer built with other keywords: say which, not the tree structure
            raise CheckpointError("mismatch", path, f"the file was written by an optimizer built with other "
                                                    f"hyperparameters: {differ}.")
        raise CheckpointError(
            "mismatch", path,
            f"the file holds another tree ({len(file_paths)} leaves; expected {len(paths)}):{order} "
            f"missing {missing[:4]}{' ...' if len(missing) > 4 else ''}, "
            f"unexpected {extra[:4]}{' ...' if len(extra) > 4 else ''}; the file's structure is "
            f"{header['treedef'][:300]}.")
    out = [_from_bytes(payload[o:o + n], d, s, None) for (_, s, d, o, n) in entries]  # on the host first
    if plan is not None:
        out = [out[ix[0]] if len(ix) == 1 and np.shape(out[ix[0]]) == _leaf_shape(leaf)
               else v1_stack([out[i] for i in ix], _leaf_dtype_name(leaf))
               for ix, leaf in zip(plan, leaves)]
        entries = [(p, _leaf_shape(x), _leaf_dtype_name(x), 0, 0) for p, x in zip(paths, out)]
    for (p, shape, dtype, _, _), leaf in zip(entries, leaves):
        want_shape, want_dtype = _leaf_shape(leaf), _leaf_dtype_name(leaf)
        if shape != want_shape or (dtype != want_dtype and not (former and (dtype, want_dtype) == _FLAG)):
            raise CheckpointError("mismatch", path, f"leaf {p} is {_fmt(shape, dtype)} in the file; "
                                                    f"expected {_fmt(want_shape, want_dtype)}.")
    if former:  # a flag stored as bool then, int32 0/1 now
        out = [_as_flag(x) if d == _FLAG[0] else x for x, (_, _, d, _, _) in zip(out, entries)]
    why = domain_error(jax.tree_util.tree_unflatten(treedef, out))  # what each state class declares
    if why is not None:
        raise CheckpointError("corrupt", path, f"it holds a value no run reaches: {why}.")
    try:
        out = treedef.flatten_up_to(settle_schedule_bases(jax.tree_util.tree_unflatten(treedef, out), like,
                                                          schedule_base))
    except ValueError as err:
        raise CheckpointError("mismatch", path, str(err)) from None
    loaded = jax.tree_util.tree_unflatten(treedef, [_placed(x, leaf) for x, leaf in zip(out, leaves)])
    form = next((g for g in grouped if jax.tree.structure(expand_groups(g)) == treedef), None)
    return loaded if form is None else regroup_like(loaded, form)
