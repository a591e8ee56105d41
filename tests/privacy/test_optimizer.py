import math

import numpy as np
import pytest
import torch

from skfedriem.manifolds import Stiefel
from skfedriem.privacy import FixedSizeSampler, PrivateManifoldOptimizer, SeededRandomness

from .models import StiefelNet, cross_entropy, make_data


def test_plain_projected_gradient_step_when_private_parts_are_off():
    model, ref = StiefelNet(), StiefelNet()
    X, y = make_data(10)
    opt = PrivateManifoldOptimizer(
        model, torch.optim.SGD(model.parameters(), lr=0.3), loss_fn=cross_entropy, clip=math.inf, noise_std=0.0
    )
    opt.step((X, y), denominator=10)
    loss = cross_entropy(ref(X), y).mean()
    gW, gw, gb = torch.autograd.grad(loss, [ref.W, ref.head.weight, ref.head.bias])
    St = Stiefel(6, 3)
    W_new = St.proj(ref.W.detach() - 0.3 * St.proju(ref.W.detach(), gW))
    torch.testing.assert_close(model.W.detach(), W_new)
    torch.testing.assert_close(model.head.weight.detach(), ref.head.weight.detach() - 0.3 * gw)
    torch.testing.assert_close(model.head.bias.detach(), ref.head.bias.detach() - 0.3 * gb)


def _run(seed, steps, optimizer="sgd", model=None):
    model = StiefelNet() if model is None else model
    X, y = make_data(100)
    sampler = FixedSizeSampler(100, 10)
    randomness = SeededRandomness(np.random.SeedSequence(seed))
    inner = (torch.optim.SGD(model.parameters(), lr=0.05) if optimizer == "sgd"
             else torch.optim.Adam(model.parameters(), lr=0.01))
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(inner, T_max=steps)
    opt = PrivateManifoldOptimizer(model, inner, loss_fn=cross_entropy, clip=1.0, noise_std=0.5, randomness=randomness)
    for _ in range(steps):
        idx = sampler.sample(randomness)
        opt.step((X[idx], y[idx]), denominator=sampler.denominator)
        sched.step()
    return model


def test_iterates_stay_on_the_manifold_after_1000_noisy_steps():
    model = _run(0, 1000, optimizer="adam")
    W = model.W.detach()
    assert float((W.T @ W - torch.eye(3, dtype=W.dtype)).abs().max()) < 1e-6


def test_same_seed_same_model_and_global_rngs_untouched():
    models = [StiefelNet() for _ in range(3)]  # nn.Linear's init uses the global RNG; the steps must not
    torch_state, np_state = torch.get_rng_state(), np.random.get_state()[1].copy()
    a, b, c = (_run(seed, 20, model=m) for seed, m in zip((3, 3, 4), models))
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert (np.random.get_state()[1] == np_state).all()
    for pa, pb, pc in zip(a.parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb)
    assert not torch.equal(a.W, c.W)


def test_rejects_bad_clip_and_noise():
    model = StiefelNet()
    inner = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="'clip'.*Got 0"):
        PrivateManifoldOptimizer(model, inner, loss_fn=cross_entropy, clip=0, noise_std=1.0)
    with pytest.raises(ValueError, match="'noise_std'.*Got -1"):
        PrivateManifoldOptimizer(model, inner, loss_fn=cross_entropy, clip=1.0, noise_std=-1)
