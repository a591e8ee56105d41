from skfedriem.classification.planning import plan_classifier
from skfedriem.decomposition.planning import plan_pca


def test_a_classifier_plan_prints_as_a_short_table_with_one_reason_a_line():
    plan = plan_classifier(model="spdnet", client_sizes=[31, 31, 30], eps=10.0)
    text = str(plan)
    lines = text.splitlines()
    assert lines[0] == "ClassifierPlan" and "why:" in lines
    assert any(line.split() == ["optimizer", "sgd"] for line in lines)
    assert any(line.split()[:2] == ["batch_size", "30"] for line in lines)
    bullets = [line for line in lines if line.startswith("  - ")]
    assert len(bullets) == len(plan.reason.split("; ")) and all(len(line) <= 100 for line in lines)


def test_a_pca_plan_prints_its_solver_and_reason():
    plan = plan_pca(eps=2.0, delta=1e-5, client_sizes=[200] * 3, n_features=10, n_components=2)
    text = str(plan)
    assert text.startswith("PCAPlan\n") and plan.solver in text and "why:" in text


def test_a_reasons_aside_in_parentheses_stays_in_its_bullet():
    """The tangent-space reason's "(...; SPDNet's rule ...)" was cut into a bullet of its own."""
    plan = plan_classifier(model="tangent", client_sizes=[40, 40], eps=4.0)
    bullets = [line for line in str(plan).splitlines() if line.startswith("  - ")]
    assert not any(line.startswith("  - SPDNet's rule") for line in bullets)
    assert len(bullets) == 3


def test_a_notebook_shows_the_same_table():
    plan = plan_pca(eps=2.0, delta=1e-5, client_sizes=[200] * 3, n_features=10, n_components=2)
    shown = []
    plan._repr_pretty_(type("P", (), {"text": lambda self, value: shown.append(value)})(), False)
    assert shown == [str(plan)]
