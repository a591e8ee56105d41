import pytest
import torch

from skfedriem.manifolds import Grassmann


@pytest.mark.parametrize("p, dim", [(1, 39), (2, 76), (4, 144), (8, 256)])
def test_dimensions_of_spec(p, dim):
    Gr = Grassmann(40, p)
    assert Gr.dim == dim
    assert Gr.ambient_dim == 820


def test_proj_is_top_p_eigenprojector(gen):
    Gr = Grassmann(9, 3)
    Y = torch.randn(9, 9, generator=gen, dtype=torch.float64)
    vals, vecs = torch.linalg.eigh((Y + Y.T) / 2)
    top = vecs[:, vals.argsort(descending=True)[:3]]
    torch.testing.assert_close(Gr.proj(Y), top @ top.T)


def test_exp_log_invariant_to_the_basis(gen):
    Gr = Grassmann(6, 2)
    P, Q = Gr.random_point(2, generator=gen)
    Q = Gr.exp(P, 0.3 * Gr.log(P, Q) / Gr.norm(P, Gr.log(P, Q)))
    # distance = ||Log|| equals sqrt(2) * ||principal angles|| for the projector embedding
    U, Y = Gr.basis(P), Gr.basis(Q)
    cosines = torch.linalg.svdvals(U.T @ Y).clamp(max=1)
    angles = torch.acos(cosines)
    torch.testing.assert_close(Gr.norm(P, Gr.log(P, Q)), 2**0.5 * angles.norm())


def test_inverse_retraction_rejects_far_points(gen):
    Gr = Grassmann(4, 1)
    e1, e2 = torch.eye(4, dtype=torch.float64)[:2]
    P = torch.outer(e1, e1)
    v = (e1 + 1.5 * e2) / (1 + 1.5**2) ** 0.5  # 56 degrees away
    with pytest.raises(ValueError, match="pi/4"):
        Gr.inv_retr(P, torch.outer(v, v))
