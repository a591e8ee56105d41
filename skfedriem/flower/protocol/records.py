"""How arrays and a round's instructions travel in Flower records (shared by the transport and the sites)."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord

from ...exceptions import InvalidInstructionsError
from ...federated.instructions import RoundInstructions
from ...privacy.mechanisms.discrete import DistributedEncoding

__all__ = ["decode_arrays", "decode_instructions", "encode_arrays", "encode_instructions"]


def encode_arrays(tensors: dict[str, torch.Tensor]) -> ArrayRecord:
    """Tensors by name -> ArrayRecord (dtype and shape kept)."""
    return ArrayRecord({name: Array(np.ascontiguousarray(t.detach().cpu().numpy())) for name, t in tensors.items()})


def decode_arrays(record: ArrayRecord) -> dict[str, torch.Tensor]:
    """Inverse of :func:`encode_arrays`."""
    return {name: torch.from_numpy(np.array(array.numpy(), copy=True)) for name, array in record.items()}


#: Instructions that may be None, which a ConfigRecord cannot hold: sent as 0 (never a valid value of theirs).
_NONE_AS_ZERO = ("records_per_subject",)
#: The keys of a distributed round's encoding in the instructions' ConfigRecord (absent: local noise).
_ENCODING = "encoding."
#: The encoding's fields a record leaves out when None (a server never announces dropped sites: a site refuses it).
_OPTIONAL_ENCODING = frozenset({"announced"})


def encode_instructions(instructions: RoundInstructions) -> ConfigRecord:
    """The public per-round instructions -> ConfigRecord (a distributed round's encoding field by field).

    A site's own setting decides whether it takes a round of distributed noise
    (:class:`~skfedriem.flower.protocol.secure_site.DistributedNoise`), and
    then only under secure aggregation: no server can switch it over.
    """
    fields = asdict(instructions)
    encoding = fields.pop("encoding")
    record = {k: 0 if k in _NONE_AS_ZERO and v is None else v for k, v in fields.items()}
    record.update({_ENCODING + k: v for k, v in (encoding or {}).items()  # a round without one: no field
                   if not (k in _OPTIONAL_ENCODING and v is None)})
    return ConfigRecord(record)


def decode_instructions(record: ConfigRecord) -> RoundInstructions:
    """Inverse of :func:`encode_instructions`; InvalidInstructionsError when an encoding's field is missing."""
    fields = {k: record[k] for k in RoundInstructions.__dataclass_fields__ if k != "encoding"}
    fields = {k: None if k in _NONE_AS_ZERO and v == 0 else v for k, v in fields.items()}
    return RoundInstructions(**fields, encoding=_decoded_encoding(record))


def _decoded_encoding(record: ConfigRecord) -> DistributedEncoding | None:
    """The encoding's fields in the instructions' record (None: local noise)."""
    encoding = {k[len(_ENCODING):]: v for k, v in record.items() if k.startswith(_ENCODING)}
    if not encoding:
        return None
    missing = sorted(set(DistributedEncoding.__dataclass_fields__) - set(encoding) - _OPTIONAL_ENCODING)
    if missing:
        raise InvalidInstructionsError(f"The round's encoding lacks {missing}.")
    return DistributedEncoding(**{k: encoding[k] for k in DistributedEncoding.__dataclass_fields__ if k in encoding})
