"""Writing a file so that a crash leaves the old content or the new, never half of one (ledgers, checkpoints, replies)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = ["write_atomically"]


def write_atomically(path: str | Path, write: Callable[[BinaryIO], None]) -> None:
    """``write(f)`` into a temporary file next to ``path``, flushed to disk, then moved over ``path``.

    The temporary file is fsynced before ``os.replace`` and the folder after
    it, so the rename itself reaches the disk; on any error the temporary file
    is removed and ``path`` is untouched.

    Parameters
    ----------
    path : str or Path
        The file to (re)write; its folder is created if needed.
    write : callable
        ``write(f)`` writes the whole content to the binary file object ``f``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
