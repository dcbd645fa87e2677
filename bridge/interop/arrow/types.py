"""Arrow names for bridge: metadata encoding, the Arrow types tensors map to,
and the names pyarrow prints for Arrow types (used in messages)."""

from __future__ import annotations

import struct
from typing import Any

from bridge._native import lib
from bridge.core import dtypes as _dtypes
from bridge.core.native import _C

# The field name of a tensor's Arrow schema, and so the one column of the record
# batch that __arrow_c_stream__ emits (DuckDB checks that the two agree).
COLUMN_NAME = "tensor"
_COLUMN = COLUMN_NAME.encode()

_FLAG_NULLABLE: int = lib.ARROW_FLAG_NULLABLE
_EXT_NAME = b"ARROW:extension:name"
_EXT_META = b"ARROW:extension:metadata"
_BOOL8 = b"arrow.bool8"
_FST = b"arrow.fixed_shape_tensor"

_DTYPE_BY_FORMAT: dict[str, _dtypes.dtype] = {
    d.arrow_format: d for d in _dtypes.all_dtypes() if d.arrow_format and d is not _dtypes.bool
}




def _pyarrow(user: str) -> Any:
    """The pyarrow module, imported on first use, for the helper named ``user``.

    pyarrow is the optional ``arrow`` extra: the C Data Interface
    (``__arrow_c_array__``, ``from_arrow`` of capsules) works without it, so
    only the helpers that make or read pyarrow objects ask for it here.
    Raises ImportError naming the extra when it is not installed.
    """
    try:
        import pyarrow
    except ImportError as e:
        raise ImportError(
            f"{user} needs pyarrow, which is not installed: pip install dlpack-bridge[arrow]"
        ) from e
    return pyarrow


# ------------------------------------------------------------- metadata


def _encode_metadata(pairs: list[tuple[bytes, bytes]]) -> bytes:
    """Arrow's binary key-value encoding: int32 count, then (int32 length, bytes)."""
    out = [struct.pack("=i", len(pairs))]
    for key, value in pairs:
        out += [struct.pack("=i", len(key)), key, struct.pack("=i", len(value)), value]
    return b"".join(out)


def _decode_metadata(raw: bytes | None) -> dict[bytes, bytes]:
    """Arrow's key-value encoding back to a dict; ValueError when malformed (the
    C reader bounds the block, this checks each entry against it)."""
    if not raw:
        return {}
    try:
        (n,) = struct.unpack_from("=i", raw, 0)
        pos, out = 4, {}
        for _ in range(n):
            (lk,) = struct.unpack_from("=i", raw, pos)
            key = raw[pos + 4 : pos + 4 + lk]
            pos += 4 + lk
            (lv,) = struct.unpack_from("=i", raw, pos)
            out[key] = raw[pos + 4 : pos + 4 + lv]
            pos += 4 + lv
    except struct.error:
        raise ValueError("malformed Arrow schema metadata") from None
    if n < 0 or pos > len(raw):
        raise ValueError("malformed Arrow schema metadata")
    return out


# Arrow C data format strings -> the names pyarrow prints (for messages).
_TYPE_NAMES = {
    "n": "null", "b": "bool", "c": "int8", "C": "uint8", "s": "int16", "S": "uint16",
    "i": "int32", "I": "uint32", "l": "int64", "L": "uint64", "e": "halffloat",
    "f": "float", "g": "double", "z": "binary", "Z": "large_binary", "vz": "binary_view",
    "u": "string", "U": "large_string", "vu": "string_view", "tdD": "date32[day]",
    "tdm": "date64[ms]", "tts": "time32[s]", "ttm": "time32[ms]", "ttu": "time64[us]",
    "ttn": "time64[ns]", "tiM": "month_interval", "tiD": "day_time_interval",
    "tin": "month_day_nano_interval", "+s": "struct", "+m": "map", "+r": "run_end_encoded",
}  # fmt: skip
_UNIT = {"s": "s", "m": "ms", "u": "us", "n": "ns"}


def _type_name(schema: Any) -> str:
    """An Arrow type's name as pyarrow prints it (``timestamp[ns]``,
    ``decimal128(10, 2)``, ``fixed_size_list<item: float>[3]``), from a
    schema description; never raises."""
    fmt, _name, meta, _flags, children, has_dict = schema
    try:
        ext = _decode_metadata(meta).get(_EXT_NAME)
    except ValueError:
        ext = None
    kids = [f"{c[1] or 'item'}: {_type_name(c)}" for c in children]
    if fmt in _TYPE_NAMES and fmt not in ("+s", "+m", "+r"):
        base = _TYPE_NAMES[fmt]
    elif fmt.startswith("d:"):
        parts = fmt[2:].split(",")
        width = parts[2] if len(parts) > 2 else "128"
        base = f"decimal{width}({', '.join(parts[:2])})"
    elif fmt.startswith("w:"):
        base = f"fixed_size_binary[{fmt[2:]}]"
    elif fmt.startswith("ts") and len(fmt) >= 4 and fmt[3] == ":" and fmt[2] in _UNIT:
        tz = fmt[4:]
        base = f"timestamp[{_UNIT[fmt[2]]}{', tz=' + tz if tz else ''}]"
    elif fmt.startswith("tD") and len(fmt) == 3 and fmt[2] in _UNIT:
        base = f"duration[{_UNIT[fmt[2]]}]"
    elif fmt in ("+l", "+L", "+vl", "+vL"):
        kind = {"+l": "list", "+L": "large_list", "+vl": "list_view", "+vL": "large_list_view"}[fmt]
        base = f"{kind}<{', '.join(kids)}>"
    elif fmt.startswith("+w:"):
        base = f"fixed_size_list<{', '.join(kids)}>[{fmt[3:]}]"
    elif fmt in ("+s", "+m", "+r"):
        base = f"{_TYPE_NAMES[fmt]}<{', '.join(kids)}>"
    elif fmt.startswith(("+ud:", "+us:")):
        base = f"{'dense' if fmt[2] == 'd' else 'sparse'}_union<{', '.join(kids)}>"
    else:
        base = f"unknown type (format {fmt!r})"
    if has_dict:
        base = f"dictionary<indices={base}>"
    if ext == _BOOL8:
        return "bool8"
    if ext == _FST and fmt.startswith("+w:") and children:
        import json  # here, not at the top: `import bridge` stays without json

        try:
            shape = json.loads(_decode_metadata(meta).get(_EXT_META) or b"{}").get("shape")
        except (ValueError, AttributeError):
            shape = None
        return f"fixed_shape_tensor[value_type={_type_name(children[0])}, shape={shape}]"
    if ext:
        return f"extension<{ext.decode(errors='replace')}> over {base}"
    return base


_BOOL8_META: bytes = _C.BOOL8_METADATA  # the C fast path's, so the two agree


def _same_type(a: Any, b: Any) -> bool:
    """Whether two schema descriptions are the same Arrow type (names, nullability
    and dim_names aside)."""
    if a[0] != b[0] or len(a[4]) != len(b[4]) or a[5] != b[5]:
        return False
    ea, eb = _decode_metadata(a[2]), _decode_metadata(b[2])
    if ea.get(_EXT_NAME) != eb.get(_EXT_NAME):
        return False
    if ea.get(_EXT_NAME) == _FST:
        import json  # here, not at the top: `import bridge` stays without json

        ma, mb = (json.loads(e.get(_EXT_META) or b"{}") for e in (ea, eb))
        if ma.get("shape") != mb.get("shape") or (ma.get("permutation") or None) != (
            mb.get("permutation") or None
        ):
            return False
    return all(_same_type(x, y) for x, y in zip(a[4], b[4]))


def _describe_spec(spec: tuple[Any, ...]) -> tuple[Any, ...]:
    fmt, name, meta, flags, children = spec
    return (fmt.decode(), name and name.decode(), meta, flags,
            tuple(_describe_spec(c) for c in children), False)  # fmt: skip


def _primitive(fmt: str, meta: bytes | None) -> _dtypes.dtype | None:
    if fmt == "c" and _decode_metadata(meta).get(_EXT_NAME) == _BOOL8:
        return _dtypes.bool
    return _DTYPE_BY_FORMAT.get(fmt)


