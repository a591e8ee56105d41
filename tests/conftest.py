import os

import numpy as np
import pytest
import torch

os.environ.setdefault("OMP_NUM_THREADS", "2")
torch.set_num_threads(2)


@pytest.fixture
def gen():
    """A seeded torch Generator (tests never use the global RNG)."""
    return torch.Generator().manual_seed(1234)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
