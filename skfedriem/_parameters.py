"""How an estimator declares its parameters once: annotated class attributes, made its ``__init__``, docs and constraints.

The public names are :func:`skfedriem.base.setting` and :func:`skfedriem.base.parameter`
(and the deprecated :func:`skfedriem.base.federated_parameters`); :class:`skfedriem.base.FederatedEstimatorMixin`
is the base every estimator's parameters come from.
"""

from __future__ import annotations

import dataclasses
import inspect
import textwrap
import warnings
from collections.abc import Mapping
from typing import Any, dataclass_transform

from .federated.settings import FederationSettings, SettingDoc, doc_entry

_SETTINGS_DEFAULT = object()  # setting()'s "the default of FederationSettings"


def setting(name: str, default: Any = _SETTINGS_DEFAULT, *, values: Mapping[str, str] | None = None,
            without: tuple = ()) -> Any:
    """Declare an estimator parameter that is the run setting ``name``: ``lr: float = setting("lr")`` in a class body.

    Its type, constraints and documentation are the field's of
    :class:`~skfedriem.federated.FederationSettings`.

    Parameters
    ----------
    name : str
        The field of :class:`~skfedriem.federated.FederationSettings`.
    default : object, optional
        The estimator's default (default: the settings' own).
    values : mapping of str to str, optional
        Special string values this estimator also takes, with what each
        means (its planner's ``"auto"``).
    without : tuple, optional
        The setting's special values (or ``None``) this estimator does not take.

    Returns
    -------
    dataclasses.Field
    """
    declared = FederationSettings.__dataclass_fields__[name]
    doc = declared.metadata["doc"].narrowed(values, without)
    return dataclasses.field(default=declared.default if default is _SETTINGS_DEFAULT else default,
                             metadata={"doc": doc})


def parameter(default: Any, type_: str, text: str, constraints: list, *,
              values: Mapping[str, str] | None = None) -> Any:
    """Declare an estimator parameter that is not a run setting, with its documentation and constraints.

    Parameters
    ----------
    default : object
    type_ : str
        Its numpydoc type.
    text : str
        What it does (one paragraph).
    constraints : list
        scikit-learn parameter constraints.
    values : mapping of str to str, optional
        Special string values, with what each means.

    Returns
    -------
    dataclasses.Field
    """
    doc = SettingDoc(type_, text, constraints, dict(values or {}))
    return dataclasses.field(default=default, metadata={"doc": doc})


#: The fitted attributes every estimator sets (post-processing of what the server saw), as docstring text.
FITTED_ATTRIBUTES = """epsilon_ : float
    Certified ε of every round run on these records (earlier fits of a
    warm start included), an upper bound; inf when any round was not private.
delta_ : float
mu0_ : float or None
    Per-step Gaussian-DP parameter Δ C / (Bσ) of the run.
noise_std_ : float
    σ of each ambient noise coordinate.
batch_size_ : int
    B after clamping (full batches: the smallest client's size).
history_ : list of dict
    Per round: ``round``, ``epsilon`` spent so far (never above ``epsilon_``),
    ``lr``, ``clients``, ``replied``, ``aggregation_seconds`` (all
    post-processing of what the server sees), the held-out metrics of data
    the server holds, and ``round_seconds`` and ``submission_seconds`` with
    ``client_timings``.
ledger_ : PrivacyAccountant
    Every private step charged (all fits of a warm start)."""

PARAMETERS_MARKER = "[federation parameters]"
ATTRIBUTES_MARKER = "[fitted privacy attributes]"


def _declare_parameters(cls: type) -> type:
    """Make ``cls``'s annotated public class attributes its parameters, and build their constraints and docs.

    The class becomes a keyword-only dataclass (without ``__eq__`` or
    ``__repr__``: scikit-learn's stay), whose ``__init__`` stores each
    parameter; annotated private attributes (``_parameter_constraints``...)
    are not parameters. A parameter declared with :func:`setting` or
    :func:`parameter`, here or in a base class, is shared: its constraints join
    ``_parameter_constraints`` and its entry replaces the docstring's
    ``[federation parameters]`` marker, with this class's default.
    """
    _refuse_silent_mistakes(cls)
    if "__init__" not in cls.__dict__ and hasattr(cls.__init__, "_hand_written"):
        cls.__init__ = cls.__init__  # a base's adopted __init__ stays this class's (adopted again for its fields)
    annotations = cls.__dict__.get("__annotations__", {})
    private = {name: annotations.pop(name) for name in [n for n in annotations if n.startswith("_")]}
    written = "__init__" in cls.__dict__
    dataclasses.dataclass(kw_only=True, eq=False, repr=False, match_args=False)(cls)
    annotations.update(private)
    if not written:
        cls.__init__._from_declarations = True
    _adopt_hand_written_init(cls)
    fields = dataclasses.fields(cls)
    docs = {f.name: doc for f in fields if (doc := f.metadata.get("doc") or _inherited_doc(cls, f.name))}
    cls._parameter_docs = docs
    inherited = {}
    for base in reversed(cls.__mro__[1:]):  # every base's own constraints, the nearest last
        inherited.update(base.__dict__.get("_parameter_constraints", {}))
    parents = {n: c for n, c in inherited.items() if n not in docs}
    cls._parameter_constraints = {**{n: doc.all_constraints for n, doc in docs.items()}, **parents,
                                  **cls.__dict__.get("_parameter_constraints", {})}
    template = cls.__dict__.get("_docstring", cls.__doc__)
    if template is not None and PARAMETERS_MARKER in template:
        cls._docstring = template
        defaults = {f.name: f.default for f in fields}
        entries = [doc_entry(name, doc, defaults[name]) for name, doc in docs.items()]
        cls.__doc__ = (template.replace(PARAMETERS_MARKER, "\n".join(entries).strip())
                       .replace(ATTRIBUTES_MARKER, textwrap.indent(FITTED_ATTRIBUTES, "    ").strip()))
    return cls


def _refuse_silent_mistakes(cls: type) -> None:
    """TypeError for what would silently not take effect: a parameter's default written without its annotation (the
    instances would keep the base's), or a base's ``__init__`` the dataclass's would never call."""
    own = cls.__dict__.get("__annotations__", {})
    inherited = {f.name for base in cls.__mro__[1:] if "__dataclass_fields__" in base.__dict__
                 for f in dataclasses.fields(base)}
    for name, value in cls.__dict__.items():
        if name in inherited and name not in own:
            raise TypeError(f"{cls.__name__}.{name} = {value!r} has no annotation, so it is not the parameter's "
                            f"default: write {name}: <type> = {value!r}.")
    if "__init__" not in cls.__dict__:
        skipped = [base.__name__ for base in cls.__mro__[1:]
                   if "__init__" in base.__dict__ and base is not object and "__dataclass_fields__" not in base.__dict__]
        if skipped:
            raise TypeError(f"{cls.__name__}'s __init__ stores its parameters and calls no other __init__, so "
                            f"{', '.join(skipped)}.__init__ would never run: give {cls.__name__} an __init__ of its "
                            "own, or move that set-up out of __init__.")


def _adopt_hand_written_init(cls: type) -> None:
    """Give an ``__init__(self, ..., **shared)`` of an earlier version the full signature (deprecated until 0.3).

    Its own parameters keep their kind and default; every other parameter
    joins as keyword-only, with the class's default: those of the bases above
    the class that wrote it are passed on to it, and those declared below it
    (a subclass's annotated attributes) are stored here.
    """
    init = cls.__dict__.get("__init__")
    original = getattr(init, "_hand_written", None)
    if original is None:
        if init is None or getattr(init, "_from_declarations", False) or not any(
                p.kind is p.VAR_KEYWORD for p in inspect.signature(init).parameters.values()):
            return
        warnings.warn(f"{cls.__name__}.__init__(..., **shared) is deprecated and is refused in 0.3: delete it and "
                      "declare the class's own parameters as annotated class attributes (depth: int = 2).",
                      FutureWarning, stacklevel=4)
        original, writer = init, cls
    else:
        writer = init._writer
    own = [p for p in inspect.signature(original).parameters.values() if p.kind is not p.VAR_KEYWORD]
    own_names = {p.name for p in own}
    fields = [f for f in dataclasses.fields(cls) if f.name not in own_names]
    above = next(b for b in writer.__mro__[1:] if "__dataclass_fields__" in b.__dict__)
    upstream = {f.name for f in dataclasses.fields(above)}
    below = {f.name for f in fields} - upstream
    shared = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default) for f in fields]

    def __init__(self, *args, **params) -> None:
        values = {**{f.name: f.default for f in fields}, **params}
        original(self, *args, **{k: v for k, v in values.items() if k not in below})
        for name in below:
            setattr(self, name, values[name])

    __init__.__qualname__, __init__.__module__ = f"{cls.__qualname__}.__init__", cls.__module__
    __init__.__signature__ = inspect.Signature(own + shared)
    __init__._hand_written, __init__._writer = original, writer
    cls.__init__ = __init__


def _inherited_doc(cls: type, name: str) -> SettingDoc | None:
    """The documentation of parameter ``name`` where a base class declared it (a subclass may restate a default)."""
    for base in cls.__mro__[1:]:
        if name in base.__dict__.get("_parameter_docs", {}):
            return base.__dict__["_parameter_docs"][name]
    return None


def federated_parameters(defaults: dict | None = None, docs: dict[str, SettingDoc] | None = None):
    """Deprecated class decorator (removed in 0.3): declare the parameters as annotated class attributes instead.

    .. deprecated:: 0.2
        A subclass of a federated estimator gets every parameter of its bases
        without a decorator; it changes a default by writing the attribute
        again (``eps: float = 1.0``) and declares its own as annotated
        attributes. The decorator still applies ``defaults`` and ``docs``.

    Parameters
    ----------
    defaults : dict, optional
        Defaults of parameters of the base classes.
    docs : dict of str to SettingDoc, optional
        Documentation and constraints of some of them.

    Returns
    -------
    callable
        ``decorate(cls) -> cls``.
    """
    warnings.warn("federated_parameters is deprecated and is removed in 0.3: a subclass of a federated estimator has "
                  "its bases' parameters; write a changed default as a class attribute (eps: float = 1.0).",
                  FutureWarning, stacklevel=2)

    def decorate(cls):
        known = {f.name: f for f in dataclasses.fields(cls)}
        for name in {**(defaults or {}), **(docs or {})}:
            default = (defaults or {}).get(name, known[name].default)
            metadata = {"doc": docs[name]} if docs and name in docs else {}
            cls.__annotations__[name] = "object"
            setattr(cls, name, dataclasses.field(default=default, metadata=metadata))
        if getattr(cls.__dict__.get("__init__"), "_from_declarations", False):
            del cls.__init__  # the dataclass's, made again with the new defaults
        return _declare_parameters(cls)

    return decorate


@dataclass_transform(kw_only_default=True, field_specifiers=(setting, parameter, dataclasses.field))
class _EstimatorParameters:
    """Every subclass's annotated public class attributes are its parameters (:func:`_declare_parameters`)."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        _declare_parameters(cls)
