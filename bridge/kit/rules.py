"""The rules the kit checks, each one a spec states: one table for the
matrix and for :func:`bridge.check`.

A matrix cell's verdict names the rule it broke
(:attr:`bridge.kit.matrix_grid.Cell.rule`), and every result of
:func:`bridge.check` names the rule its check judges
(:attr:`bridge.kit.conformance_report.RuleResult.rule`); :data:`RULES` maps
that name to the spec, the section and the words of the rule, so a report can
say exactly which sentence of which spec was broken, and a user can read it
there. Nothing is judged that no spec asks for: a copy where zero-copy was
possible is reported (the ``copy`` verdict) but is not a violation; where the
kit asks for more than a spec's "must" (a versioned answer to ``max_version``,
which the array API recommends), the rule's text says so.
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
_DLPACK_PY = "https://dmlc.github.io/dlpack/latest/python_spec.html"
_EXCHANGE_RFC = "https://github.com/data-apis/array-api/issues/972"
_ARRAY_DLPACK_DEVICE = (
    "https://data-apis.org/array-api/latest/API_specification/generated/array_api.array.__dlpack_device__.html"
)
_ARROW_DEVICE = "https://arrow.apache.org/docs/format/CDeviceDataInterface.html"
_JAX_ARRAY = "https://docs.jax.dev/en/latest/jep/28661-jax-array-protocol.html"
_CUDA_STREAM = "https://nvidia.github.io/cuda-python/cuda-core/latest/interoperability.html#cuda-stream-protocol"
_DEFAULT_CONVERT = "https://docs.pytorch.org/docs/stable/data.html#torch.utils.data.default_convert"
_DATAFRAME_API = "https://data-apis.org/dataframe-protocol/latest/API.html"
_ARROW_STREAM = "https://arrow.apache.org/docs/format/CStreamInterface.html"
_DLPACK_MAIN = "https://github.com/dmlc/dlpack/blob/main/include/dlpack/dlpack.h"


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
         "Strides are in elements and may be zero or negative (DLPack >= 1.2: never NULL for ndim > 0); "
         "a producer's strides are its memory's layout, and a consumer honours them or refuses the "
         "tensor, it never reads it as compact.", _DLPACK_C),
    Rule("shape", "DLPack C API", "DLTensor.ndim / shape",
         "ndim and shape are the array's (never NULL for ndim > 0, never a negative ndim); a 0-d tensor "
         "has ndim 0 and one element; a zero-size tensor has a 0 extent and no elements (its data may "
         "be NULL); both cross intact.", _DLPACK_C),
    Rule("dtype", "DLPack C API", "DLDataType",
         "The element type is a DLDataTypeCode with a bit width dlpack.h defines for it, lanes 1 for "
         "arrays, in native byte order, and it crosses unchanged: a uint16 does not arrive as "
         "bfloat16, a bool not as uint8.", _DLPACK_C),
    Rule("read-only", "DLPack C API", "DLPACK_FLAG_BITMASK_READ_ONLY",
         "A producer sets READ_ONLY exactly when its memory is read-only, and never lends such memory "
         "in a legacy capsule, which cannot say so; the consumer must not write it: it refuses it or "
         "gives back an array that cannot be written through.", _DLPACK_C),
    Rule("deleter", "DLPack C API", "DLManagedTensorVersioned.deleter",
         "The consumer calls the producer's deleter exactly once, when it no longer needs the "
         "memory (a capsule dropped unconsumed calls it from its destructor); the memory stays valid "
         "until then, whatever becomes of the producer object.", _DLPACK_C),
    Rule("device", "Array API", "array.__dlpack_device__",
         "__dlpack_device__() returns a tuple of two ints: a DLDeviceType dlpack.h defines and a "
         "device id >= 0.", _ARRAY_DLPACK_DEVICE),
    Rule("capsule", "DLPack Python specification", "PyCapsule names and versions",
         "__dlpack__ returns a PyCapsule named 'dltensor' (a DLManagedTensor) or 'dltensor_versioned' "
         "(a DLManagedTensorVersioned of major version 1); a consumer refuses any other name, and a "
         "major version it does not know, without calling the deleter of a struct it cannot read.",
         _DLPACK_PY),
    Rule("max_version", "Array API", "array.__dlpack__(max_version=...)",
         "A producer answers a max_version below 1.0 with a legacy 'dltensor' capsule and one of 1.x "
         "or more with a 'dltensor_versioned' capsule of major version 1 (a legacy answer is allowed "
         "but cannot carry READ_ONLY or IS_COPIED: this kit requires the versioned one); a consumer "
         "takes either.", _ARRAY_DLPACK),
    Rule("signature", "Array API", "array.__dlpack__ signature",
         "__dlpack__ takes the keyword-only stream, max_version, dl_device and copy and raises "
         "TypeError for any other keyword; a consumer retries without the new keywords when an old "
         "producer raises TypeError for them.", _ARRAY_DLPACK),
    Rule("stream", "Array API", "array.__dlpack__(stream=...)",
         "For memory without a stream concept (CPU) stream is None; a stream the producer cannot "
         "use there is refused with BufferError or ValueError.", _ARRAY_DLPACK),
    Rule("exceptions", "Array API", "from_dlpack / array.__dlpack__, Raises",
         "An exchange that cannot be done is refused with BufferError (data that cannot be "
         "exported or imported), TypeError (an object that is not an array of the protocol) or "
         "ValueError (a copy that copy=False forbids); not RuntimeError or a library's own type.",
         _FROM_DLPACK),
    Rule("copy", "Array API", "from_dlpack(copy=...) / __dlpack__(copy=...)",
         "copy=True always returns new memory (a producer sets IS_COPIED on it): writing to the result "
         "never changes the source; copy=False never copies (BufferError where it would have to).",
         _FROM_DLPACK),
    Rule("dl_device", "Array API", "array.__dlpack__(dl_device=...)",
         "__dlpack__ accepts dl_device; asked for the array's own device it exports as without it "
         "(BufferError, or ValueError, only for a device the producer cannot handle).", _ARRAY_DLPACK),
    Rule("dtype-device-exchange", "Array API RFC (data-apis/array-api#972, dmlc/dlpack#172)",
         "dtype.__dlpack_data_type__ / device.__dlpack_device__",
         "A dtype object's __dlpack_data_type__() returns the (code, bits, lanes) of DLDataType, and a "
         "device object's __dlpack_device__() the (device_type, device_id) of DLDevice, as ints; a "
         "producer's tensor's dtype and device objects say what its DLPack export says of it (a draft "
         "that paddle 3.3 implements and tvm-ffi reads: judged only where the objects have the methods).",
         _EXCHANGE_RFC),
    Rule("arrow-release", "Arrow C data interface", "Release callback semantics",
         "The consumer calls release exactly once; the producer's memory stays valid until then.",
         _ARROW_C),
    Rule("packed-subbyte", "DLPack C API", "DLDataType / DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED",
         "A sub-byte type (bits < 8: float4, float6, 1/2/4-bit ints) is packed, little bit-endian, "
         "unless a versioned capsule sets IS_SUBBYTE_TYPE_PADDED (one value per byte); a legacy "
         "capsule cannot, so its sub-byte values are packed; a consumer never reads packed values "
         "as one per byte: it views them packed, unpacks them, or refuses.", _DLPACK_C),
    Rule("exchange-api-chain", "DLPack C API", "DLPackExchangeAPIHeader.prev_api",
         "A type's __dlpack_c_exchange_api__ table starts with {version, prev_api}: prev_api is NULL "
         "or an older table of the same chain; a consumer that does not know a table's major "
         "version walks prev_api to one it knows, and without one falls back to __dlpack__, "
         "never calling a table it cannot read.", _DLPACK_C),
    Rule("non-null-strides", "DLPack C API", "DLTensor.strides (since v1.2)",
         "A producer of DLPack >= 1.2 never gives NULL strides for ndim != 0, on any path (capsules "
         "of either kind, the C exchange API); a consumer reads NULL strides from an older "
         "producer (below 1.2, or a legacy capsule) as compact row-major.", _DLPACK_C),
    Rule("jax-array", "JAX", "JEP 28661, __jax_array__",
         "An object's __jax_array__() returns a jax.Array holding the object's values, shape and "
         "dtype (under jax's own dtype rules), so jnp.asarray takes it.", _JAX_ARRAY),
    Rule("arrow-device-stream", "Arrow C device data interface", "ArrowDeviceArrayStream",
         "__arrow_c_device_stream__ returns an 'arrow_device_array_stream' capsule whose stream "
         "gives a schema and ArrowDeviceArrays on the stream's device type (reserved zeroed; a "
         "CUDA array's sync_event, when set, is waited for before its memory is read), ends with a "
         "released array, and is released once.", _ARROW_DEVICE),
    Rule("cuda-stream", "cuda.core", "CUDA stream protocol (__cuda_stream__)",
         "A stream object's __cuda_stream__() returns (0, handle), the protocol's version 0 and "
         "the CUstream address as an int; a library that takes a stream takes such an object (or "
         "refuses it with TypeError, the array API's type for a stream it does not take).",
         _CUDA_STREAM),
    Rule("alignment", "DLPack C API", "DLTensor.data",
         "data + byte_offset may start anywhere: dlpack.h means data to be 256-byte aligned, but says "
         "\"it is recommended to not rely on the data pointer being correctly aligned\", and NumPy exports "
         "memory aligned to no element (an odd address, or complex at its component's alignment); a "
         "consumer takes such memory and reads and computes its values right, copies it, or refuses it "
         "(BufferError); it never faults on it nor reads other values.", _DLPACK_C),
    Rule("byte-order", "DLPack C API", "DLDataType (native endian-ness)",
         "DLPack has no byte order: elements are in the native one, and a producer asked to export "
         "another refuses (\"an explicit error message should be raised when attempting to export an "
         "array with non-native endianness\": BufferError); where the byte order travels with the data "
         "(a buffer's format '>f', an array interface's typestr '>f4') a consumer honours it, swaps it "
         "(a copy) or refuses; values read in the wrong byte order are a violation.", _DLPACK_C),
    Rule("chunks", "Arrow C stream interface", "ArrowArrayStream.get_next",
         "A stream (a chunked array's __arrow_c_stream__) gives its values in order, in as many arrays "
         "as it has, until get_next returns a released array: a consumer that makes one array of it "
         "concatenates every chunk (a copy, and says so) or refuses; it never takes the first chunk "
         "alone.", _ARROW_STREAM),
    Rule("unknown-code", "DLPack C API (main branch)", "DLDataTypeCode / DLDeviceType (after v1.3)",
         "A consumer takes a DLDataTypeCode and a DLDeviceType only as what they are; one it does not "
         "hold (DLPack main's kDLBcomplex 18, complex of two bfloat16 halves; kDLTPU 19, kDLTPUHost 20, "
         "kDLAscend 21) it refuses with BufferError (the array API's type; TypeError and ValueError "
         "also pass), never reading the memory as another dtype, or device memory as host memory "
         "(TPU host memory is host memory: a CPU array over it is right).", _DLPACK_MAIN),
    Rule("batch", "bridge.convert", "Batches",
         "A batch converts into the same structure: a dict with the same keys in order, every leaf "
         "that is no array kept as the very object, every array converted once (the same array at two "
         "places comes back as the one copy at both, or, shared, as views of the one memory), and at "
         "most one CopyWarning per call, whose leaves name the path of each array it copied "
         "(\"['x']\"), as torch's default_convert keeps a batch; bridge's docs/convert.md states it.",
         _DEFAULT_CONVERT),
    Rule("table", "bridge.convert", "Tables",
         "A table converts into a dict of its column names, in the table's order, to the destination's "
         "arrays, each holding the values the table's own library reads from that column (the columns "
         "of the dataframe interchange protocol, by name, in order); bridge's docs/convert.md states "
         "it.", _DATAFRAME_API),
)}  # fmt: skip


def rule(name: str) -> Rule:
    """The rule called ``name``; KeyError names the known ones."""
    try:
        return RULES[name]
    except KeyError:
        raise KeyError(f"unknown rule {name!r}; known: {', '.join(RULES)}") from None
