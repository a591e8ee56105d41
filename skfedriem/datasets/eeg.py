"""EEG trials from MOABB as (X, y, groups), with subjects or sessions as clients."""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

import numpy as np

__all__ = ["load_moabb", "use_local_eegmmidb"]

_CLIENT_KEYS = {"subject": ("subject",), "session": ("subject", "session")}


def _require_moabb():
    try:
        import moabb  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "Loading EEG datasets needs MOABB and MNE: pip install 'skfedriem[eeg]'."
        ) from exc


def load_moabb(dataset, paradigm, *, subjects=None, clients: str = "subject"):
    """Epoched trials of a MOABB dataset, labels, and the client of each trial.

    Parameters
    ----------
    dataset : moabb.datasets.base.BaseDataset
        E.g. ``BNCI2014_001()`` or ``PhysionetMI(imagined=True)``.
    paradigm : moabb.paradigms.base.BaseParadigm
        E.g. ``LeftRightImagery(fmin=8, fmax=32, resample=128)``; it sets the
        band-pass, resampling and epoching.
    subjects : list of int, optional
        Default: all subjects of the dataset.
    clients : {"subject", "session"}, default="subject"
        One client per subject, or one per (subject, session).

    Returns
    -------
    X : ndarray of shape (n_trials, n_channels, n_times)
        In volts, as MOABB returns them; e.g. ``pyriemann.estimation.Covariances``
        turns them into the SPD input of :class:`FederatedSPDNetClassifier`.
    y : ndarray of shape (n_trials,)
        The paradigm's labels (strings).
    groups : ndarray of shape (n_trials,)
        Client labels: ``"subject-1"`` or ``"subject-1/session-0train"``.
    """
    if clients not in _CLIENT_KEYS:
        raise ValueError(f"The 'clients' parameter must be one of {sorted(_CLIENT_KEYS)}. Got {clients!r} instead.")
    _require_moabb()
    import mne

    # MNE logs every file it reads ("Used Annotations descriptions ...", 15 lines a subject) and MOABB
    # warns of its own future: keep a load quiet, as the rest of skfedriem is (MNE's warnings still show).
    with mne.utils.use_log_level("WARNING"), warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"(moabb|mne)(\.|$)")
        X, y, meta = paradigm.get_data(dataset, subjects=subjects)
    parts = [meta["subject"].astype(str).radd("subject-")]
    if clients == "session":
        parts.append(meta["session"].astype(str).radd("session-"))
    groups = parts[0] if len(parts) == 1 else parts[0] + "/" + parts[1]
    return np.asarray(X), np.asarray(y), groups.to_numpy(dtype=str)


def use_local_eegmmidb(source: str | os.PathLike, root: str | os.PathLike | None = None) -> Path:
    """Make MNE and MOABB read local PhysioNet eegmmidb files instead of downloading.

    Links every ``S*/S*R*.edf`` of ``source`` (PhysioNet layout) into
    ``root/MNE-eegbci-data/files/eegmmidb/1.0.0/`` and sets
    ``MNE_DATASETS_EEGBCI_PATH``, ``MNE_DATA`` and ``MOABB_DOWNLOAD_PROVIDER``
    in ``os.environ`` for this process. ``source`` itself is never written to.
    Runs absent from ``source`` would still trigger a download attempt, so
    restrict the dataset to the runs present (e.g. ``PhysionetMI.feet_runs = []``).

    Parameters
    ----------
    source : path
        Folder holding ``S001/S001R04.edf`` ...
    root : path, optional
        Where to build the link tree (default: a new temporary folder).

    Returns
    -------
    root : Path
    """
    source = Path(source).resolve()
    recordings = sorted(source.glob("S*/S*R*.edf"))
    if not recordings:
        raise ValueError(f"The 'source' folder holds no PhysioNet recordings (S*/S*R*.edf). Got {str(source)!r}.")
    root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="eegmmidb-"))
    target = root / "MNE-eegbci-data" / "files" / "eegmmidb" / "1.0.0"
    for edf in recordings:
        link = target / edf.parent.name / edf.name
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(edf)
    os.environ.update(
        {"MNE_DATASETS_EEGBCI_PATH": str(root), "MNE_DATA": str(root), "MOABB_DOWNLOAD_PROVIDER": "upstream"}
    )
    return root
