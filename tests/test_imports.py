"""Import cost and the optional pyarrow: what `import bridge` loads (not pyarrow, hashlib,
json, subprocess, multiprocessing or the kit), the lazy multiprocessing
registration (bridge.interop.processes), and bridge without pyarrow: the Arrow
C Data Interface works, the pyarrow helpers raise ImportError naming the extra.
Each case runs in a fresh interpreter, as what is imported is process state."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

TIMEOUT = 120


def _run(*parts: str) -> str:
    """Run the parts (each dedented on its own) as one script in a fresh interpreter."""
    code = "\n".join(textwrap.dedent(part) for part in parts)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_import_bridge_loads_none_of_the_heavy_or_unused_modules():
    out = _run(
        """
        import sys
        def heavy():
            roots = ("pyarrow", "json", "subprocess", "multiprocessing", "hashlib", "secrets")
            return sorted(m for m in sys.modules
                          if m.split(".")[0] in roots or m.startswith("bridge.kit"))
        before = heavy()
        import bridge
        t = bridge.arange(4)  # and first use of the core
        print(before, heavy())
        """
    )
    # before: the check would be vacuous if the interpreter had loaded them itself
    assert out.split() == ["[]", "[]"], out


def test_kit_loads_on_first_use():
    out = _run(
        """
        import sys, bridge
        assert "bridge.kit.conformance" not in sys.modules
        check = bridge.check
        print(check.__module__, "bridge.kit.conformance" in sys.modules)
        """
    )
    assert out.split() == ["bridge.kit.conformance", "True"]


_FORKING_PICKLER_CHECK = """
    from multiprocessing.reduction import ForkingPickler
    import bridge, os, tempfile
    extra = ForkingPickler._extra_reducers
    assert extra.get(bridge.Tensor).__module__ == "bridge.interop.processes", extra
    assert extra.get(bridge.UntypedStorage).__module__ == "bridge.interop.processes", extra
    # the multiprocessing reducer is the one used: a file-backed shared storage goes by path
    path = os.path.join(tempfile.mkdtemp(), "t.bin")
    with open(path, "wb") as f:
        f.write(bytes(64))
    st = bridge.UntypedStorage.from_file(path, shared=True, nbytes=64)
    data = bytes(ForkingPickler.dumps(st))
    assert b"_rebuild_file" in data, data
    back = ForkingPickler.loads(data)
    back[0] = 7
    assert st[0] == 7  # the same file, mapped again
    os.remove(path)
    print("ok")
"""


def test_multiprocessing_registration_happens_on_its_first_import():
    out = _run(
        """
        import sys, inspect, bridge
        from bridge.interop.processes import _RegisterOnImport
        COLLATE = "torch.utils.data._utils.collate"
        assert "multiprocessing.reduction" not in sys.modules and COLLATE not in sys.modules
        (finder,) = [f for f in sys.meta_path if isinstance(f, _RegisterOnImport)]
        assert finder.pending == {"multiprocessing.reduction", COLLATE}
        import multiprocessing.reduction as r
        # one shot per module: the finder waits only for torch's collate now (torch is not
        # imported here), and the module is the real one
        assert [f.pending for f in sys.meta_path if isinstance(f, _RegisterOnImport)] == [{COLLATE}]
        assert "class ForkingPickler" in inspect.getsource(r)
        """,
        _FORKING_PICKLER_CHECK,
    )
    assert out.strip() == "ok"


def test_multiprocessing_registration_when_already_imported():
    out = _run(
        """
        import sys, multiprocessing.reduction, bridge
        from bridge.interop.processes import _RegisterOnImport
        pending = [f.pending for f in sys.meta_path if isinstance(f, _RegisterOnImport)]
        assert pending == [{"torch.utils.data._utils.collate"}], pending
        """,
        _FORKING_PICKLER_CHECK,
    )
    assert out.strip() == "ok"


# ---- without pyarrow (it is the `arrow` extra)

_NO_PYARROW = """
    import sys
    sys.modules["pyarrow"] = None  # `import pyarrow` now raises ImportError, as when not installed
    import bridge
"""


def test_arrow_c_data_interface_works_without_pyarrow():
    pytest.importorskip("nanoarrow")  # in the test extra; it does not need pyarrow
    out = _run(
        _NO_PYARROW,
        """
        import nanoarrow as na
        t = bridge.arange(6, dtype=bridge.int32)
        schema, array = t.__arrow_c_array__()
        assert type(schema).__name__ == type(array).__name__ == "PyCapsule"
        a = na.Array(t)  # nanoarrow consumes bridge's capsules
        assert a.to_pylist() == [0, 1, 2, 3, 4, 5], a.to_pylist()
        u = bridge.from_arrow(a)  # and bridge imports nanoarrow's, zero-copy
        assert u.tolist() == t.tolist() and u.data_ptr() == t.data_ptr()
        assert bridge.from_arrow(t).data_ptr() == t.data_ptr()
        m = bridge.arange(6, dtype=bridge.float64).reshape(2, 3)  # fixed_shape_tensor
        assert bridge.from_arrow(na.Array(m)).tolist() == m.tolist()
        assert "pyarrow" not in sys.modules or sys.modules["pyarrow"] is None
        print("ok")
        """
    )
    assert out.strip() == "ok"


@pytest.mark.parametrize(
    ("call", "name"),
    [
        ("bridge.arrow.to_buffer(t)", "to_buffer()"),
        ("bridge.arrow.to_array(t)", "to_array()"),
        ("bridge.arrow.to_tensor(t)", "to_tensor()"),
        ("bridge.arrow.to_fixed_shape_tensor(t.reshape(2, 3))", "to_fixed_shape_tensor()"),
        ("bridge.arrow.write_ipc(os.path.join(tempfile.mkdtemp(), 'x.arrow'), t)", "write_ipc()"),
        ("bridge.arrow.read_ipc(b'ARROW1')", "read_ipc()"),
    ],
)
def test_pyarrow_helpers_name_the_extra_without_pyarrow(call: str, name: str):
    out = _run(
        _NO_PYARROW,
        f"""
        import os, tempfile
        t = bridge.arange(6, dtype=bridge.int32)
        try:
            {call}
        except ImportError as e:
            print(type(e).__name__, "|", e)
        else:
            print("no error")
        """
    )
    assert out.startswith("ImportError | "), out
    assert name in out and "pip install dlpack-bridge[arrow]" in out, out


def test_pyarrow_helpers_work_with_pyarrow():
    # the reference for the case above: the same calls succeed when pyarrow is there
    pa = pytest.importorskip("pyarrow")
    import bridge

    t = bridge.arange(6, dtype=bridge.int32)
    assert isinstance(bridge.arrow.to_array(t), pa.Array)
    assert isinstance(bridge.arrow.to_buffer(t), pa.Buffer)
