import pytest
import scipy.linalg
import torch

from skfedriem.manifolds import ConvergenceError, Stiefel
from skfedriem.manifolds.stiefel import solve_lyapunov_batched


def test_dimensions():
    St = Stiefel(22, 16)
    assert St.dim == 22 * 16 - 16 * 17 // 2
    assert St.ambient_dim == 22 * 16


def test_proj_is_scipy_polar_factor(gen):
    St = Stiefel(8, 3)
    Y = torch.randn(8, 3, generator=gen, dtype=torch.float64)
    U, _ = scipy.linalg.polar(Y.numpy())  # Y = U P, U the unitary factor
    torch.testing.assert_close(St.proj(Y), torch.from_numpy(U))


def test_proj_is_not_qr(gen):
    St = Stiefel(6, 2)
    Y = torch.randn(6, 2, generator=gen, dtype=torch.float64)
    Q, R = torch.linalg.qr(Y)
    Q = Q * torch.sign(torch.diagonal(R))
    assert not torch.allclose(St.proj(Y), Q, atol=1e-3)


def test_batched_lyapunov_matches_scipy(gen):
    A = torch.eye(4, dtype=torch.float64) + 0.2 * torch.randn(5, 4, 4, generator=gen, dtype=torch.float64)
    C = torch.randn(5, 4, 4, generator=gen, dtype=torch.float64)
    S = solve_lyapunov_batched(A, C)
    for i in range(5):
        ref = scipy.linalg.solve_continuous_lyapunov(A[i].numpy(), C[i].numpy())
        torch.testing.assert_close(S[i], torch.from_numpy(ref))


def test_inverse_retraction_is_tangent_and_batched(gen):
    St = Stiefel(10, 4)
    X = St.random_point(6, generator=gen)
    Y = St.retr(X, 0.3 * St.random_tangent(X, generator=gen))
    V = St.inv_retr(X, Y)
    torch.testing.assert_close(St.proju(X, V), V)
    torch.testing.assert_close(St.retr(X, V), Y)


def test_exp_is_a_geodesic_of_the_embedded_metric(gen):
    # Embedded-metric geodesics have acceleration normal to the manifold: X'' = -X (X'ᵀX').
    St = Stiefel(7, 3)
    X = St.random_point(generator=gen)
    V = St.random_tangent(X, generator=gen)
    h = 1e-3
    c = lambda t: St.exp(X, t * V)  # noqa: E731
    acc = (c(h) - 2 * c(0.0) + c(-h)) / h**2
    torch.testing.assert_close(St.proju(X, acc), torch.zeros_like(acc), atol=1e-5, rtol=0)
    torch.testing.assert_close(c(0.0), X)


def test_log_raises_when_it_cannot_converge(gen):
    St = Stiefel(4, 2)
    X = St.random_point(generator=gen)
    with pytest.raises(ConvergenceError, match="did not converge"):
        St.log(X, -X, max_iter=20)


def test_rejects_bad_shape():
    with pytest.raises(ValueError, match="p <= n"):
        Stiefel(2, 3)


def test_inverse_retraction_at_paper_sizes(gen):
    # St(22, 16) with 5 clients: p² = 256, where batched LU of the Kronecker form fails with MKL here
    St = Stiefel(22, 16)
    X = St.random_point(generator=gen)
    V = 0.05 * St.random_tangent(X.expand(5, 22, 16), generator=gen)
    torch.testing.assert_close(St.inv_retr(X, St.retr(X, V)), V, atol=1e-10, rtol=0)
