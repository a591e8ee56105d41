"""Datasets: synthetic federated problems with known structure, and MOABB EEG loaders."""

from ._pca import make_federated_pca
from ._spd import make_spd_classification
from .eeg import load_moabb, use_local_eegmmidb

__all__ = ["load_moabb", "make_federated_pca", "make_spd_classification", "use_local_eegmmidb"]
