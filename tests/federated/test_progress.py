import sys
import time

from skfedriem.federated import progress


def test_by_default_a_long_fit_on_a_terminal_shows_its_progress_and_a_short_one_does_not(monkeypatch, capsys):
    """verbose='auto': a bar where someone is watching, once the fit has lasted PROGRESS_DELAY_S."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(progress, "PROGRESS_DELAY_S", 0.2)
    for _ in progress.round_progress(range(2), "auto"):
        pass
    assert capsys.readouterr().err == ""  # shorter than the delay
    for _ in progress.round_progress(range(3), "auto"):
        time.sleep(0.15)
    assert "round" in capsys.readouterr().err
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    for _ in progress.round_progress(range(3), "auto"):
        time.sleep(0.15)
    assert capsys.readouterr().err == ""  # a pipe or a log: nobody watching


def test_auto_is_a_level_of_one_only_where_someone_watches(monkeypatch):
    assert progress.verbosity(0) == 0 and progress.verbosity(2) == 2
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert progress.verbosity("auto") == 0  # a pipe or a log
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert progress.verbosity("auto") == 1  # a terminal
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    monkeypatch.setitem(sys.modules, "ipykernel", object())
    assert progress.verbosity("auto") == 1  # a notebook's kernel
