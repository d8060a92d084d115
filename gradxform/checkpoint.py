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

The header holds ``format`` (version, now 1), ``leaves`` (one
``[path, shape, dtype, offset, nbytes]`` per leaf; path is
`jax.tree_util.keystr`), ``treedef`` (its string, for messages),
``payload_size``, ``payload_sha256`` and a user ``meta`` map.

Writing is atomic: the bytes go to a temporary file in the same directory,
which is flushed and fsync'ed, then `os.replace`d over ``path`` (and the
directory fsync'ed). A process killed mid-write leaves the old file intact
(and at worst a stray ``.<name>.*.tmp`` file).

Reading checks, in order, and raises `CheckpointError` with ``kind``:
``'truncated'`` (the file is shorter than it says it is), ``'corrupt'`` (bad
magic, a checksum that does not match, an unreadable header, trailing bytes)
or ``'mismatch'`` (a valid file whose paths, shapes, dtypes or metadata differ
from what the caller expects). Nothing is returned, and so nothing in memory
changes, unless every check passed.
"""
from __future__ import annotations

import hashlib
import os
import struct
import tempfile
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["CheckpointError", "save_state", "load_state", "read_metadata", "FORMAT_VERSION"]

FORMAT_VERSION = 1
MAGIC = b"GXCKPT\x00\x01"
_PREFIX = struct.Struct("<8sQQ8s")  # magic, header length, file length, prefix checksum
_SHA = 32
_CHUNK = 1 << 22


class CheckpointError(ValueError):
    """A checkpoint file that cannot be loaded. ``kind`` is 'truncated',
    'corrupt' or 'mismatch'; ``path`` is the file."""

    KINDS = ("truncated", "corrupt", "mismatch")

    def __init__(self, kind: str, path, message: str):
        assert kind in self.KINDS, kind
        self.kind = kind
        self.path = os.fspath(path)
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
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


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
        data = np.frombuffer(buf, np.uint32).copy()
        data = data.reshape(shape + (data.size // max(int(np.prod(shape)), 1),) if data.size else shape)
        return jax.random.wrap_key_data(jnp.asarray(data), impl=impl)
    value = np.frombuffer(buf, jnp.dtype(dtype_name)).reshape(shape).copy()
    if isinstance(like_leaf, np.ndarray) or like_leaf is None:
        return value
    sharding = getattr(like_leaf, "sharding", None)
    if sharding is not None:
        return jax.device_put(value, sharding)
    return jnp.asarray(value)


def _describe(tree) -> tuple[list, Any, list]:
    flat, treedef = jax.tree_util.tree_flatten_with_path(tree)
    paths = [jax.tree_util.keystr(p) for p, _ in flat]
    return paths, treedef, [leaf for _, leaf in flat]


def _msgpack_safe(obj):
    """Meta values: only msgpack-native types, so a file never needs pickle."""
    try:
        packed = _msgpack().packb(obj, use_bin_type=True)
        return _msgpack().unpackb(packed, raw=False, strict_map_key=False)
    except (TypeError, ValueError) as err:
        raise TypeError(f"save_state(meta=...): meta must hold only numbers, strings, bools, None, "
                        f"lists and dicts; {err}.") from None


# -- writing ------------------------------------------------------------------------

def save_state(path, state, *, meta: dict | None = None) -> None:
    """Writes the pytree ``state`` to ``path`` atomically (see the module docstring).

    Every leaf is stored with its exact bytes, shape and dtype (bfloat16 and
    typed PRNG keys included), so `load_state` gives it back bit for bit.
    ``meta`` is a small dict of plain values kept in the header (the Trainer
    stores the optimizer's name there).
    """
    path = os.fspath(path)
    paths, treedef, leaves = _describe(state)
    hosts = [_to_host(x) for x in leaves]
    entries, offset, sha = [], 0, hashlib.sha256()
    for p, x, h in zip(paths, leaves, hosts):
        entries.append([p, list(_leaf_shape(x)), _leaf_dtype_name(x), offset, h.nbytes])
        offset += h.nbytes
        sha.update(h)
    header = _msgpack().packb({
        "format": FORMAT_VERSION, "leaves": entries, "treedef": str(treedef),
        "payload_size": offset, "payload_sha256": sha.hexdigest(),
        "meta": _msgpack_safe(meta or {}),
    }, use_bin_type=True)
    total = _PREFIX.size + len(header) + _SHA + offset
    head = struct.pack("<8sQQ", MAGIC, len(header), total)
    prefix = head + hashlib.sha256(head).digest()[:8]

    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(prefix)
            f.write(header)
            f.write(hashlib.sha256(header).digest())
            for h in hosts:
                for start in range(0, h.nbytes, _CHUNK):
                    f.write(h[start:start + _CHUNK])
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
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

def _read(path) -> tuple[dict, memoryview]:
    """Returns (header, payload) after every integrity check."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        data = f.read()
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
    try:
        header = _msgpack().unpackb(raw, raw=False, strict_map_key=False)
    except Exception as err:  # noqa: BLE001 -- any decoding failure is corruption
        raise CheckpointError("corrupt", path, f"the header cannot be decoded ({err}).") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT_VERSION:
        fmt = header.get("format") if isinstance(header, dict) else None
        raise CheckpointError("mismatch", path, f"format version {fmt!r}; this gradxform reads "
                                                f"version {FORMAT_VERSION}.")
    payload = memoryview(data)[hend + _SHA:]
    if len(payload) != header["payload_size"]:
        raise CheckpointError("corrupt", path, "the payload size disagrees with the header.")
    if hashlib.sha256(payload).hexdigest() != header["payload_sha256"]:
        raise CheckpointError("corrupt", path, "the payload fails its SHA-256 checksum.")
    return header, payload


def read_metadata(path) -> dict:
    """The ``meta`` map of a checkpoint (after every integrity check)."""
    return _read(path)[0]["meta"]


def _fmt(shape, dtype) -> str:
    return f"{dtype}[{','.join(str(d) for d in shape)}]"


def load_state(path, like=None, *, meta: dict | None = None):
    """Reads a file written by `save_state`.

    Args:
      path: the file.
      like: a pytree with the expected structure (arrays, or
        `jax.ShapeDtypeStruct`s as from `jax.eval_shape`); the result has
        its structure, and each leaf goes where ``like``'s leaf lives (its
        sharding, or NumPy for a NumPy leaf). With ``like=None`` the result
        is a dict ``{keystr path: array}``.
      meta: expected metadata; each key given must equal the file's value.

    Returns:
      The tree, bit-identical to what was saved.

    Raises:
      CheckpointError: 'truncated', 'corrupt' or 'mismatch' (paths, shapes,
        dtypes or meta differ from ``like``/``meta``); nothing is returned.
    """
    header, payload = _read(path)
    entries = header["leaves"]
    file_meta = header.get("meta", {})
    for key, want in (meta or {}).items():
        got = file_meta.get(key)
        if got != _msgpack_safe(want):
            raise CheckpointError("mismatch", path, f"meta[{key!r}] is {got!r} in the file; "
                                                    f"expected {want!r}.")
    if like is None:
        return {p: _from_bytes(payload[o:o + n], d, tuple(s), None) for p, s, d, o, n in entries}
    paths, treedef, leaves = _describe(like)
    file_paths = [e[0] for e in entries]
    if file_paths != paths:
        missing = [p for p in paths if p not in file_paths]
        extra = [p for p in file_paths if p not in paths]
        raise CheckpointError(
            "mismatch", path,
            f"the file holds another tree ({len(file_paths)} leaves; expected {len(paths)}): "
            f"missing {missing[:4]}{' ...' if len(missing) > 4 else ''}, "
            f"unexpected {extra[:4]}{' ...' if len(extra) > 4 else ''}; the file's structure is "
            f"{header.get('treedef', '?')[:300]}.")
    for (p, shape, dtype, _, _), leaf in zip(entries, leaves):
        want_shape, want_dtype = _leaf_shape(leaf), _leaf_dtype_name(leaf)
        if tuple(shape) != want_shape or dtype != want_dtype:
            raise CheckpointError("mismatch", path, f"leaf {p} is {_fmt(shape, dtype)} in the file; "
                                                    f"expected {_fmt(want_shape, want_dtype)}.")
    out = [_from_bytes(payload[o:o + n], d, tuple(s), leaf)
           for (_, s, d, o, n), leaf in zip(entries, leaves)]
    return jax.tree_util.tree_unflatten(treedef, out)
