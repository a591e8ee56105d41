import pytest
import torch
from torch.func import grad, vmap

from skfedriem.models import log_eig, log_re_eig, re_eig, spectral_function
from skfedriem.models.spectral import loewner_matrix


def spd(gen, *batch, n=6, dtype=torch.float64):
    A = torch.randn(*batch, n, 2 * n, generator=gen, dtype=dtype)
    return A @ A.transpose(-1, -2) / (2 * n) + 0.05 * torch.eye(n, dtype=dtype)


def symmetrised(fn):
    return lambda X: fn((X + X.transpose(-1, -2)) / 2)


@pytest.mark.parametrize(
    "fn", [log_eig, lambda X: re_eig(X, 0.3), lambda X: log_re_eig(X, 0.3)], ids=["log", "reeig", "log_reeig"]
)
def test_gradcheck_on_generic_inputs(gen, fn):
    X = spd(gen, 3).requires_grad_()
    assert torch.autograd.gradcheck(symmetrised(fn), (X,))


def test_forward_matches_eigendecomposition(gen):
    X = spd(gen, 4)
    w, U = torch.linalg.eigh(X)
    torch.testing.assert_close(log_eig(X), U @ torch.diag_embed(w.log()) @ U.mT)
    torch.testing.assert_close(re_eig(X, 0.0), X)
    clamped = U @ torch.diag_embed(w.clamp_min(0.2)) @ U.mT
    torch.testing.assert_close(re_eig(X, 0.2), clamped)
    torch.testing.assert_close(log_re_eig(X, 0.2), log_eig(clamped))


def test_fused_layer_has_the_gradient_of_the_composition(gen):
    X = spd(gen, 5)
    G = torch.randn(5, 6, 6, generator=gen, dtype=torch.float64)
    grads = []
    for fn in (lambda Y: log_re_eig(Y, 0.3), lambda Y: log_eig(re_eig(Y, 0.3))):
        Y = X.clone().requires_grad_()
        (fn(Y) * G).sum().backward()
        grads.append(Y.grad)
    torch.testing.assert_close(grads[0], grads[1])


def test_backward_matches_torch_eigh_when_eigenvalues_are_distinct(gen):
    X = spd(gen, 3)
    G = torch.randn(3, 6, 6, generator=gen, dtype=torch.float64)
    ours = X.clone().requires_grad_()
    (log_eig(ours) * G).sum().backward()
    ref = X.clone().requires_grad_()
    w, U = torch.linalg.eigh(ref)
    ((U @ torch.diag_embed(w.log()) @ U.mT) * G).sum().backward()
    torch.testing.assert_close(ours.grad, (ref.grad + ref.grad.mT) / 2)


def test_identity_input_has_finite_gradient_equal_to_the_limit():
    # all eigenvalues equal: d log(X) at I is the identity map, d ReEig at I (above floor) too
    X = torch.eye(5, dtype=torch.float64).repeat(2, 1, 1).requires_grad_()
    G = torch.arange(50, dtype=torch.float64).reshape(2, 5, 5)
    (log_eig(re_eig(X, 1e-4)) * G).sum().backward()
    torch.testing.assert_close(X.grad, (G + G.mT) / 2)


@pytest.mark.parametrize("case", ["rank_deficient", "tiny_scale"])
def test_clamped_spectra_give_finite_gradients(gen, case):
    if case == "rank_deficient":
        A = torch.randn(4, 6, 3, generator=gen, dtype=torch.float64)
        X = A @ A.mT  # rank 3: three eigenvalues are 0 (up to rounding)
    else:
        X = 1e-12 * spd(gen, 4)  # every eigenvalue below the floor, as raw EEG in V²
    X.requires_grad_()
    out = log_re_eig(X, 1e-4) + re_eig(X, 1e-4)
    (out * torch.randn(out.shape, generator=gen, dtype=out.dtype)).sum().backward()
    assert torch.isfinite(X.grad).all()
    if case == "tiny_scale":
        assert (X.grad == 0).all()  # fully clamped: the output does not depend on X


def test_loewner_matrix_uses_the_derivative_on_ties():
    w = torch.tensor([1.0, 1.0, 4.0], dtype=torch.float64)
    L = loewner_matrix("log", w)
    torch.testing.assert_close(L[0, 1], torch.tensor(1.0, dtype=torch.float64))
    torch.testing.assert_close(L[0, 2], torch.log(torch.tensor(4.0, dtype=torch.float64)) / 3)
    torch.testing.assert_close(L.diagonal(), 1 / w)


def test_vmap_per_sample_gradients_match_a_loop(gen):
    X = spd(gen, 4)

    def loss(Y):
        return log_re_eig(Y, 0.3).pow(2).sum()

    batched = vmap(grad(loss))(X)
    looped = []
    for x in X:
        x = x.clone().requires_grad_()
        looped.append(torch.autograd.grad(loss(x), x)[0])
    torch.testing.assert_close(batched, torch.stack(looped))


def test_unknown_kind_is_rejected():
    with pytest.raises(ValueError, match="'kind'.*'sqrt'"):
        spectral_function(torch.eye(2), "sqrt")
