"""Small test modules with a Stiefel block and Euclidean blocks."""

import torch
import torch.nn.functional as F
from torch import nn

from skfedriem.manifolds import ManifoldParameter, Stiefel


class StiefelNet(nn.Module):
    """x -> Linear(tanh(Wᵀx)), W on St(n, p): a BiMap-like projection then a classifier."""

    def __init__(self, n=6, p=3, n_classes=3, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        St = Stiefel(n, p)
        self.W = ManifoldParameter(St.random_point(generator=g), St)
        self.head = nn.Linear(p, n_classes).double()
        with torch.no_grad():
            self.head.weight.copy_(torch.randn(self.head.weight.shape, generator=g, dtype=torch.float64))
            self.head.bias.zero_()

    def forward(self, x):
        return self.head(torch.tanh(x @ self.W))


def cross_entropy(output, target):
    return F.cross_entropy(output, target, reduction="none")


def make_data(n_records=200, n=6, n_classes=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n_records, n, generator=g, dtype=torch.float64) * 2
    y = torch.randint(n_classes, (n_records,), generator=g)
    return X, y
