"""Writing files without following links: every file the project writes goes through here.

- :func:`atomic_write` writes a fresh temporary file in the target's folder (created with
  ``O_CREAT | O_EXCL | O_NOFOLLOW``, so it can be neither an existing file nor a planted
  link) and renames it over the target; a target that is a link is refused, so nothing is
  ever written through one;
- :func:`open_new` creates a file that must not exist yet (a link there is refused);
- :func:`open_append` appends to a regular file, never through a link.

A refusal is a :class:`~wirelessfl.errors.RunFolderError` of one line that names the path.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import IO

from wirelessfl.errors import RunFolderError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def refuse_link(path: Path) -> None:
    """Raise if ``path`` is a symbolic link (the tool never writes through one)."""
    if os.path.islink(path):
        raise RunFolderError(f"{path} is a symbolic link where wirelessfl writes a file; remove "
                             "it (nothing was written through it) or choose another folder")


def _open(path: Path, flags: int, what: str) -> int:
    try:
        fd = os.open(path, flags | _NOFOLLOW | _CLOEXEC, 0o644)
    except FileExistsError:
        refuse_link(path)
        raise RunFolderError(f"{path} already exists; wirelessfl never overwrites a file it did "
                             "not write: choose another folder") from None
    except OSError as exc:
        refuse_link(path)  # O_NOFOLLOW on a link: ELOOP
        raise RunFolderError(f"cannot {what} {path} ({exc.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RunFolderError(f"{path} is not a regular file; remove it or choose another folder")
    return fd


def open_new(path: Path, mode: str = "w") -> IO:
    """A new file at ``path`` (refused when anything, a link included, is there)."""
    fd = _open(Path(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, "create")
    return os.fdopen(fd, mode, **({} if "b" in mode else {"newline": ""}))


def open_append(path: Path, mode: str = "a") -> IO:
    """``path`` opened for appending (created if missing), never through a link."""
    fd = _open(Path(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, "append to")
    return os.fdopen(fd, mode, **({} if "b" in mode else {"newline": ""}))


def atomic_write(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """``write(fh)`` into a fresh temporary file, then rename it over ``path``.

    ``fh`` is a binary file object. An interrupted write leaves ``path`` as it was; a link at
    ``path`` is refused before anything is written.
    """
    path = Path(path)
    refuse_link(path)
    folder = path.parent
    for attempt in range(100):
        tmp = folder / f".{path.name}.{os.getpid()}.{attempt}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o644)
            break
        except FileExistsError:
            continue
        except OSError as exc:
            raise RunFolderError(f"cannot write in {folder} ({exc.strerror})") from None
    else:
        raise RunFolderError(f"{folder} is full of temporary files .{path.name}.*.tmp; remove "
                             "them")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        refuse_link(path)
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def write_bytes(path: Path, data: bytes) -> None:
    """``data`` written atomically to ``path`` (:func:`atomic_write`)."""
    atomic_write(path, lambda fh: fh.write(data))
