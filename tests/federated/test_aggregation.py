import pytest
import torch

from skfedriem.federated import AGGREGATIONS, get_aggregation
from skfedriem.manifolds import Euclidean, Grassmann, Sphere, Stiefel

MANIFOLDS = [Sphere(5), Stiefel(6, 3), Grassmann(6, 2)]


def near_points(M, k, scale, gen):
    theta = M.random_point(generator=gen)
    local = M.retr(theta.expand(k, *theta.shape), scale * M.random_tangent(theta.expand(k, *theta.shape), generator=gen))
    return theta, local


@pytest.mark.parametrize("name", AGGREGATIONS.names())
def test_euclidean_blocks_take_the_arithmetic_mean(name, gen):
    M = Euclidean(3, 2)
    theta = torch.randn(3, 2, generator=gen, dtype=torch.float64)
    local = torch.randn(5, 3, 2, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(get_aggregation(name)(M, theta, local), local.mean(0))


@pytest.mark.parametrize("M", MANIFOLDS, ids=repr)
@pytest.mark.parametrize("name", AGGREGATIONS.names())
def test_output_on_manifold_and_identical_submissions_are_fixed(M, name, gen):
    theta, local = near_points(M, 4, 0.1, gen)
    out = get_aggregation(name)(M, theta, local)
    assert M.check_point(out, atol=1e-10)
    same = local[:1].expand(3, *local.shape[1:])
    # Sub and Out are inverse maps for these rules; RLAvg's lifting inverts the
    # retraction only to second order (Π(θ + P_θ(x − θ)) = x + O(|x − θ|²)).
    atol = 1e-9 if name != "rlavg" else float((local[0] - theta).norm()) ** 2
    torch.testing.assert_close(get_aggregation(name)(M, theta, same), local[0], atol=atol, rtol=0)


@pytest.mark.parametrize("M", MANIFOLDS, ids=repr)
def test_rules_agree_to_first_order(M, gen):
    theta, local = near_points(M, 6, 1e-3, gen)
    outs = {name: get_aggregation(name)(M, theta, local) for name in ("projavg", "rlavg", "retavg", "kfavg")}
    spread = max(float((outs[a] - outs["projavg"]).abs().max()) for a in outs)
    step = float((local - theta).abs().max())
    assert spread < 10 * step**2  # the rules differ at second order only


def test_unknown_rule_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"'aggregation'.*kfavg.*projavg.*Got 'fedavg'"):
        get_aggregation("fedavg")
