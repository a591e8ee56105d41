import torch

from skfedriem.manifolds import Sphere


def test_distance_is_angle(gen):
    S = Sphere(5)
    x, y = S.random_point(2, generator=gen)
    angle = torch.acos((x * y).sum())
    torch.testing.assert_close(S.norm(x, S.log(x, y)), angle)


def test_exp_at_zero_is_identity(gen):
    S = Sphere(4)
    x = S.random_point(generator=gen)
    torch.testing.assert_close(S.exp(x, torch.zeros_like(x)), x)
    torch.testing.assert_close(S.log(x, x), torch.zeros_like(x))
