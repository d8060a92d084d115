"""What decoding a msgpack document will allocate, counted on its bytes without
decoding it (`decoded_cost`): a checkpoint header is checked against its
file's length before `msgpack.unpackb` builds anything, because a forged
header of 4 million empty arrays is 4 MB on disk and 300 MB decoded."""
from __future__ import annotations

__all__ = ["decoded_cost"]

# first byte -> (bytes after it, items inside, bytes decoding it allocates), for fixed-size values
_FIXED = {0xc0: (0, 0, 0), 0xc2: (0, 0, 0), 0xc3: (0, 0, 0), 0xca: (4, 0, 24), 0xcb: (8, 0, 24),
          0xcc: (1, 0, 32), 0xcd: (2, 0, 32), 0xce: (4, 0, 32), 0xcf: (8, 0, 36), 0xd0: (1, 0, 32),
          0xd1: (2, 0, 32), 0xd2: (4, 0, 32), 0xd3: (8, 0, 36), 0xd4: (2, 0, 96), 0xd5: (3, 0, 96),
          0xd6: (5, 0, 96), 0xd7: (9, 0, 96), 0xd8: (17, 0, 112)}
_SIZED = {0xc4: (1, "bin"), 0xc5: (2, "bin"), 0xc6: (4, "bin"), 0xc7: (1, "ext"), 0xc8: (2, "ext"),
          0xc9: (4, "ext"), 0xd9: (1, "str"), 0xda: (2, "str"), 0xdb: (4, "str"), 0xdc: (2, "array"),
          0xdd: (4, "array"), 0xde: (2, "map"), 0xdf: (4, "map")}


def _str_cost(raw: bytes, pos: int, n: int) -> int:
    """sys.getsizeof of the str msgpack decodes from raw[pos:pos+n] (an upper bound when not ASCII)."""
    return 41 + n if raw[pos:pos + n].isascii() else 80 + 4 * n


def decoded_cost(raw: bytes, limit: int) -> int | None:
    """An upper bound of the bytes msgpack allocates decoding ``raw`` (each
    object's ``sys.getsizeof`` and its slot in its container), counted
    without decoding; None as soon as it passes ``limit``. A forged header of
    4 million empty arrays is 4 MB on disk but 300 MB decoded: counting it
    first keeps a load within its bound (4x the file + 1 MiB)."""
    pos, todo, cost, n_raw = 0, 1, 0, len(raw)
    while todo and pos < n_raw:
        todo -= 1
        b = raw[pos]
        pos += 1
        cost += 8  # the object's slot in its container
        if b <= 0x7f or b >= 0xe0:  # fixint: CPython's cached small ints
            pass
        elif b <= 0x8f:
            todo += 2 * (b & 0x0f)
            cost += 232 + 48 * (b & 0x0f)
        elif b <= 0x9f:
            todo += b & 0x0f
            cost += 56 + 8 * (b & 0x0f)
        elif b <= 0xbf:
            n = b & 0x1f
            cost += _str_cost(raw, pos, n)
            pos += n
        elif b in _FIXED:
            extra, _, c = _FIXED[b]
            pos += extra
            cost += c
        elif b in _SIZED:
            width, kind = _SIZED[b]
            n = int.from_bytes(raw[pos:pos + width], "big")
            pos += width
            if kind == "array":
                todo += n
                cost += 56 + 8 * n
            elif kind == "map":
                todo += 2 * n
                cost += 232 + 48 * n
            elif kind == "str":
                cost += _str_cost(raw, pos, n)
                pos += n
            else:
                pos += n + (1 if kind == "ext" else 0)
                cost += 96 + n
        else:  # 0xc1: never used; unpackb reports it
            return cost
        if cost > limit:
            return None
    return cost
