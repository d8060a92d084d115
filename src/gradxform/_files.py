"""What every reader and writer of gradxform takes as a file: a path (``str``,
``bytes`` or ``os.PathLike``) or, for reading, an open binary file object.

Reading refuses anything but a regular file before reading a byte: the path is
opened with ``O_NONBLOCK`` (a FIFO without a writer would block ``open``
forever; on a regular file the flag changes nothing) and the open descriptor
is checked with ``fstat`` (so a FIFO, ``/dev/zero``, a socket or a directory
is refused, with no window between a check and the open). An open file
object is checked the same way through its ``fileno()`` when it has one
(``io.BytesIO`` has none and is read as it is).
"""
from __future__ import annotations

import io
import os
import re
import stat
import tempfile
import threading
import time
from typing import Callable

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks (see remove_stray_temps)
    fcntl = None

__all__ = ["PathTypeError", "path_of", "read_regular", "temp_prefix", "TEMP_PREFIX", "new_file_mode", "remove_stray_temps",
           "create_locked_temp"]

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


class PathTypeError(TypeError):
    """A path argument of a type that is neither a path nor a binary file."""


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def path_of(path, who: str) -> str:
    """``path`` (``str``, ``bytes`` or ``os.PathLike``) as a ``str``; TypeError
    naming ``who`` for anything else."""
    if isinstance(path, (str, bytes, os.PathLike)):
        out = os.fspath(path)
        if isinstance(out, (str, bytes)):
            return os.fsdecode(out)
    raise PathTypeError(f"{who}: expected a path (str, bytes or os.PathLike); got {type(path).__name__}.")


def read_regular(source, who: str, refuse: Callable[[str, str], Exception]) -> tuple[bytes, str]:
    """``(the bytes of source, a label for messages)``. ``source`` is a path or
    an open binary file object; ``refuse(label, why)`` makes the exception
    raised for a file that is not a regular file or not opened in binary mode.
    TypeError for a source of another type."""
    if hasattr(source, "read"):
        label = getattr(source, "name", None)
        label = os.fsdecode(label) if isinstance(label, (str, bytes, os.PathLike)) else "<file>"
        try:
            fd = source.fileno()
        except (OSError, AttributeError, ValueError):  # io.BytesIO, a wrapper without a descriptor
            fd = None
        if fd is not None:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise refuse(label, f"{who}: the open file is {_kind(mode)}, not a regular file; reading it "
                                    "could block forever or never end.")
        data = b"" if isinstance(source, io.TextIOBase) else source.read()
        if isinstance(source, io.TextIOBase) or not isinstance(data, (bytes, bytearray, memoryview)):
            raise refuse(label, f"{who}: the file object is in text mode; open the file in binary mode "
                                "('rb').")
        return bytes(data), label
    if not isinstance(source, (str, bytes, os.PathLike)):
        raise PathTypeError(f"{who}: expected a path (str, bytes or os.PathLike) or a binary file object opened "
                        f"with 'rb'; got {type(source).__name__}.")
    label = path_of(source, who)
    fd = os.open(label, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise refuse(label, f"{who}: {label!r} is {_kind(mode)}, not a regular file; reading it could "
                                "block forever or never end.")
        with os.fdopen(fd, "rb") as f:
            fd = None
            return f.read(), label
    finally:
        if fd is not None:
            os.close(fd)


# -- writing -------------------------------------------------------------------------

TEMP_PREFIX = ".gx-"  # the temporary name of a file whose own name leaves no room for ``.<name>.``
_TEMP_EXTRA = len("..") + 8 + len(".tmp")  # ".<name>." + tempfile's 8 characters + ".tmp"


def temp_prefix(directory: str, base: str) -> str:
    """The prefix of a temporary file written beside ``directory/base`` before it is
    renamed over it: ``.<base>.`` where that name fits the directory's name limit
    (``NAME_MAX``, 255 bytes on most filesystems), else the short `TEMP_PREFIX`,
    so that any name the filesystem accepts can be written to."""
    try:
        limit = os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):  # no pathconf (Windows), or no such limit reported
        limit = 255
    if len(os.fsencode(base)) + _TEMP_EXTRA <= limit:
        return f".{base}."
    return TEMP_PREFIX


_UMASK_LOCK = threading.Lock()


def _umask() -> int:
    """The process's umask, read without changing it where Linux says it
    (``/proc/self/status``); elsewhere set and restored under a lock."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def new_file_mode(path: str) -> int:
    """The permission bits a file written at ``path`` gets: an existing regular
    file's own (an overwrite keeps them), else those ``open(path, 'w')`` would
    give a new file (``0o666`` less the umask)."""
    try:
        st = os.stat(path)
        if stat.S_ISREG(st.st_mode):
            return stat.S_IMODE(st.st_mode)
    except OSError:
        pass
    return 0o666 & ~_umask()


_STRAY_AGE_S = 60.0  # a temporary file untouched this long, and unlocked, is a killed writer's
_NO_LOCK_AGE_S = 3600.0  # where there are no advisory locks (Windows), age is the only evidence


def _same_file(fd: int, name: str) -> bool:
    try:
        st, mine = os.stat(name), os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def remove_stray_temps(directory: str, base: str) -> None:
    """Deletes the temporary files that killed writers of ``base`` left behind.

    The rule: a writer holds an exclusive `flock` on its temporary file from
    just after creating it until after renaming it over ``path``, and the
    kernel drops that lock when the writer dies in any way, SIGKILL included.
    So a ``.<base>.XXXXXXXX.tmp`` file whose lock we can take has no live
    writer. We do not judge by the pid in a name: pids are reused, and mean
    nothing across hosts sharing a filesystem or across containers' pid
    namespaces, so a "dead" pid can be a live writer. The file must also be
    unmodified for ``_STRAY_AGE_S`` (a live writer writes it continuously):
    that spares live writers of older gradxform versions, which did not lock,
    and filesystems where locks are not shared between clients. A file we
    cannot open or lock (another user's, or ENOLCK) is left alone. Errors
    here never fail the save.
    """
    pattern = re.compile(re.escape(temp_prefix(directory, base)) + r"[a-z0-9_]{8}\.tmp")  # mkstemp's names
    try:
        entries = [e for e in os.scandir(directory) if pattern.fullmatch(e.name)
                   and e.is_file(follow_symlinks=False)]
    except OSError:
        return
    for entry in entries:
        try:
            fd = os.open(entry.path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))  # NFS locks need write
        except OSError:
            continue
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # OSError: a live writer holds it
            age = time.time() - os.fstat(fd).st_mtime
            if age >= (_STRAY_AGE_S if fcntl is not None else _NO_LOCK_AGE_S) and _same_file(fd, entry.path):
                os.unlink(entry.path)
        except OSError:
            pass
        finally:
            os.close(fd)


def create_locked_temp(directory: str, base: str) -> tuple[int, str]:
    """A new temporary file for ``base``, locked (see `remove_stray_temps`)."""
    while True:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=temp_prefix(directory, base), suffix=".tmp")
        if fcntl is None:
            return fd, tmp
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # waits only while a cleaner looks at this very file
        except OSError:  # no locks on this filesystem: the cleaner cannot lock it either
            return fd, tmp
        if _same_file(fd, tmp):
            return fd, tmp
        os.close(fd)  # a cleaner took it between mkstemp and flock: make another
