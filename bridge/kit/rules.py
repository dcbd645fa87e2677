"""The rules the matrix checks, each one a spec states.

A cell's verdict names the rule it broke (:attr:`bridge.kit.matrix_grid.Cell.rule`);
:data:`RULES` maps that name to the spec, the section and the words of the rule,
so a report can say exactly which sentence of which spec was broken, and a
user can read it there. Nothing is checked that no spec asks for: a copy
where zero-copy was possible is reported (the ``copy`` verdict) but is not a
violation.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Rule", "RULES", "rule"]

_DLPACK_C = "https://dmlc.github.io/dlpack/latest/c_api.html"
_FROM_DLPACK = "https://data-apis.org/array-api/latest/API_specification/generated/array_api.from_dlpack.html"
_ARRAY_DLPACK = (
    "https://data-apis.org/array-api/latest/API_specification/generated/array_api.array.__dlpack__.html"
)
_ARROW_C = "https://arrow.apache.org/docs/format/CDataInterface.html"


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule: its ``name`` (what a cell records), the ``spec`` and
    ``section`` that state it, the rule in a sentence (``text``) and where
    to read it (``url``)."""

    name: str
    spec: str
    section: str
    text: str
    url: str

    def cite(self) -> str:
        """``"<spec>, <section>"``: how a report names the rule's source."""
        return f"{self.spec}, {self.section}"


RULES: dict[str, Rule] = {r.name: r for r in (
    Rule("values", "DLPack C API", "DLTensor (data, byte_offset, shape, strides)",
         "The consumer's array holds the producer's elements: element i sits at "
         "data + byte_offset + sum(index * stride) * itemsize.", _DLPACK_C),
    Rule("strides", "DLPack C API", "DLTensor.strides",
         "Strides are in elements and may be zero or negative (DLPack >= 1.2: never NULL); a consumer "
         "honours them or refuses the tensor, it never reads it as compact.", _DLPACK_C),
    Rule("shape", "DLPack C API", "DLTensor.ndim / shape",
         "A 0-d tensor has ndim 0 and one element; a zero-size tensor has a 0 extent and no elements "
         "(its data may be NULL); both cross intact.", _DLPACK_C),
    Rule("dtype", "DLPack C API", "DLDataType",
         "The element type (code, bits, lanes) crosses unchanged: a uint16 does not arrive as "
         "bfloat16, a bool not as uint8.", _DLPACK_C),
    Rule("read-only", "DLPack C API", "DLPACK_FLAG_BITMASK_READ_ONLY",
         "Memory the producer lends read-only must not be written by the consumer: the consumer "
         "refuses it or gives back an array that cannot be written through.", _DLPACK_C),
    Rule("deleter", "DLPack C API", "DLManagedTensorVersioned.deleter",
         "The consumer calls the producer's deleter exactly once, when it no longer needs the "
         "memory.", _DLPACK_C),
    Rule("exceptions", "Array API", "from_dlpack / array.__dlpack__, Raises",
         "An exchange that cannot be done is refused with BufferError (data that cannot be "
         "exported or imported), TypeError (an object that is not an array of the protocol) or "
         "ValueError (a copy that copy=False forbids); not RuntimeError or a library's own type.",
         _FROM_DLPACK),
    Rule("copy", "Array API", "from_dlpack(copy=...) / __dlpack__(copy=...)",
         "copy=True always returns new memory: writing to the result never changes the source.",
         _FROM_DLPACK),
    Rule("dl_device", "Array API", "array.__dlpack__(dl_device=...)",
         "__dlpack__ accepts dl_device; asked for the array's own device it exports as without it "
         "(BufferError only for a device the producer cannot handle).", _ARRAY_DLPACK),
    Rule("arrow-release", "Arrow C data interface", "Release callback semantics",
         "The consumer calls release exactly once; the producer's memory stays valid until then.",
         _ARROW_C),
)}  # fmt: skip


def rule(name: str) -> Rule:
    """The rule called ``name``; KeyError names the known ones."""
    try:
        return RULES[name]
    except KeyError:
        raise KeyError(f"unknown rule {name!r}; known: {', '.join(RULES)}") from None
