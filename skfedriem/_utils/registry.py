"""One idiom for every name a user can pass: aggregation rules, accounting methods, optimisers, backends, deployable kinds.

Each is a :class:`Registry`: ``register(obj, name=..., force=False)`` adds an
entry (refusing to replace one unless ``force``), ``get(name_or_object)``
returns it (an object of the registry's type passes through) or raises a
ValueError listing the registered names, and :meth:`Registry.constraint` is a
scikit-learn parameter constraint that reads the registry when it validates,
so that a name registered after import is accepted at fit time.
"""

from __future__ import annotations

from functools import cache
from typing import Generic, TypeVar

__all__ = ["Registry", "registered_name"]

T = TypeVar("T")


@cache
def _registered_names_type() -> type:
    """scikit-learn's ``StrOptions`` over the names a registry holds when it validates (not when it was built).

    Built on first use, so that importing a registry does not import
    scikit-learn (a deployed site's ClientApp imports the backend registry).
    """
    from .compat import StrOptions

    class RegisteredNames(StrOptions):
        def __init__(self, registry: Registry) -> None:
            self._registry = registry
            super().__init__(set())

        @property
        def options(self) -> set[str]:
            return set(self._registry.names())

        @options.setter
        def options(self, value) -> None:  # StrOptions.__init__ assigns it; the registry is the source
            pass

    return RegisteredNames


class Registry(Generic[T]):
    """Named entries of one kind, looked up by the parameter that names them.

    Parameters
    ----------
    parameter : str
        The estimator parameter whose values these are (for messages), e.g. ``"aggregation"``.
    kind : type, optional
        Objects of this type are accepted by :meth:`get` as they are.
    """

    def __init__(self, parameter: str, kind: type | None = None) -> None:
        self.parameter = parameter
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, obj: T, *, name: str, force: bool = False) -> T:
        """Make ``obj`` available as ``name``; ValueError if the name is taken, unless ``force``."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"A registered {self.parameter} needs a non-empty string name. Got {name!r}.")
        if self.kind is not None and not isinstance(obj, self.kind):
            raise TypeError(f"Only a {self.kind.__name__} can be registered as a {self.parameter}. "
                            f"Got {type(obj).__name__}.")
        if name in self._entries and not force:
            raise ValueError(f"A {self.parameter} named {name!r} is already registered; pass force=True to "
                             "replace it.")
        self._entries[name] = obj
        return obj

    def names(self) -> tuple[str, ...]:
        """The registered names, sorted."""
        return tuple(sorted(self._entries))

    def get(self, key: str | T) -> T:
        """The entry named ``key`` (or ``key`` itself, if it is an object of this kind)."""
        if self.kind is not None and isinstance(key, self.kind):
            return key
        try:
            return self._entries[key]
        except (KeyError, TypeError):
            raise ValueError(f"The '{self.parameter}' parameter must be one of {list(self.names())}. "
                             f"Got {key!r} instead.") from None

    def __contains__(self, key) -> bool:
        return isinstance(key, str) and key in self._entries

    def constraint(self):
        """A scikit-learn constraint (``StrOptions``) satisfied by the names registered when it is checked."""
        return _registered_names_type()(self)


def registered_name(obj, name: str | None) -> str:
    """The name a named object (an aggregation rule, an accounting method) is registered under: its own.

    A ``name`` given must be the object's: clients look it up by the name the server sends.
    """
    if name is not None and name != obj.name:
        raise ValueError(f"A {type(obj).__name__} is registered under its own name {obj.name!r}; got name={name!r}. "
                         "Build it with the name it should have.")
    return obj.name
