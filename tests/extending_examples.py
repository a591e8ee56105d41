"""The documentation's extension examples (``docs/user_guide/extending/``), imported once per test session."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "user_guide" / "extending"


def load_example(stem: str) -> ModuleType:
    """The example file ``stem.py``, imported as the module ``extending_example_<stem>`` (once: a second import
    would register its names again)."""
    name = f"extending_example_{stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{stem}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
