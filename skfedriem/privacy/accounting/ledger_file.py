"""A JSON ledger file shared by processes: read, change and write it under an exclusive lock, atomically.

Used by :class:`~skfedriem.privacy.PrivacyBudget` with a ``path`` and by a
Flower site's own ledger. The lock (``fcntl.flock`` on a sidecar ``.lock``
file, POSIX only) serialises concurrent fits or rounds; the new content is
written to a temporary file in the same folder, flushed to disk and moved
over the old one with ``os.replace``, so a crash leaves either the old or the
new ledger, never half of one.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..._utils.files import write_atomically

__all__ = ["locked_ledger", "read_ledger"]


def read_ledger(path: str | Path, default: dict) -> dict:
    """The ledger's content, or a copy of ``default`` when the file does not exist yet."""
    path = Path(path)
    if not path.exists():
        return copy.deepcopy(default)
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"The privacy ledger {str(path)!r} is not valid JSON ({exc}); refusing to guess "
                         "what was spent. Restore it from a backup.") from None


@contextmanager
def locked_ledger(path: str | Path, default: dict) -> Iterator[dict]:
    """Hold the ledger's lock; yield its content; write it back if the block ends without an exception.

    Mutate the yielded dict in place. An exception inside the block (e.g. a
    refused charge) leaves the file unchanged.
    """
    import fcntl  # POSIX; imported here so the rest of the package imports everywhere

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            content = read_ledger(path, default)
            yield content
            write_atomically(path, lambda f: f.write(json.dumps(content, indent=1).encode()))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
