"""Every copy of CUDA memory goes through one mechanism, the CUDA driver's copy
engine in ``cdefs/interop/cuda.c``: ``clone``/``contiguous``, ``copy_`` both
ways, ``numpy(force=True)``, ``__dlpack__(copy=True)`` and ``dl_device``.

No GPU is needed: ``fake_libcuda.c`` is a driver over host memory, built here
with gcc as ``libcuda.so.1`` and found by a subprocess through
``LD_LIBRARY_PATH`` (the test process itself keeps whatever driver it has, and
its fake device pointers are never copied). Each test runs a snippet in such a
subprocess; the snippet asserts, against NumPy, the values a copy produced
and, against the fake's call log, which driver calls made it (with their
rows, pitches and streams). The fake refuses, as the driver does, pitches less
than a row or over the maximum, device pointers outside a block of the current
device and host pointers inside one; every snippet ends by checking that no
call was refused and every context pushed was popped.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import bridge

HERE = pathlib.Path(__file__).resolve().parent
# The subprocess imports the bridge this process imported (a worktree's, or the
# sanitizer build of `make test-sanitize`): its folder is the working directory.
ROOT = pathlib.Path(bridge.__file__).resolve().parent.parent


def _build(folder: pathlib.Path, *defines: str) -> pathlib.Path:
    folder.mkdir(parents=True, exist_ok=True)
    cmd = ["gcc", "-shared", "-fPIC", "-O1", "-g", "-Wall", "-Werror", *defines,
           "-Wl,-soname,libcuda.so.1", str(HERE / "fake_libcuda.c"), "-o", str(folder / "libcuda.so.1")]  # fmt: skip
    subprocess.run(cmd, check=True)
    return folder


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A folder holding the fake libcuda.so.1."""
    return _build(tmp_path_factory.mktemp("fake_cuda"))


@pytest.fixture(scope="module")
def fake_without_2d(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A fake driver that lacks cuMemcpy2DAsync_v2 (an old or broken driver)."""
    return _build(tmp_path_factory.mktemp("fake_cuda_no2d"), "-DFAKE_OMIT_2D")


PRELUDE = r'''
import ctypes, weakref
import numpy as np
import bridge
from bridge.core.native import _C

fake = ctypes.CDLL("libcuda.so.1")  # the library bridge loads: one copy in the process
fake.fake_log.restype = ctypes.c_char_p
fake.fake_mark_device.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
fake.fake_fail.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
fake.fake_unmark.argtypes = [ctypes.c_void_p]


def log():
    return fake.fake_log().decode().splitlines()


def calls(prefix="cuMemcpy"):
    return [line for line in log() if line.startswith(prefix)]


def reset():
    fake.fake_reset()


def fail(name, rc=700, skip=0):
    fake.fake_fail(name.encode(), rc, skip)


def on_device(arr, dev=0):
    """A CUDA tensor over a NumPy array's memory (marked as device memory in the fake)."""
    base = arr if arr.base is None else arr.base
    fake.fake_mark_device(base.ctypes.data, base.nbytes, dev)
    weakref.finalize(base, fake.fake_unmark, base.ctypes.data)  # host memory again once freed
    dt = bridge.core.dtypes.from_numpy_dtype(arr.dtype)
    return _C.from_memory(arr.ctypes.data, dt, arr.shape, arr.strides, arr, False, (2, dev))


def host_of(t):
    return t.numpy(force=True)


def check_clean():
    bad = [line for line in log() if line.startswith("INVALID")]
    assert not bad, bad
    assert fake.fake_ctx_depth() == 0


def _show_log(kind, value, tb):  # a failure shows the driver calls that led to it
    import sys, traceback
    traceback.print_exception(kind, value, tb)
    print("the fake driver's last calls:", *log()[-20:], sep="\n  ", file=sys.stderr)


import sys
sys.excepthook = _show_log


def device_buffer(n=120, dtype=np.float32, dev=0):
    buf = np.arange(n).astype(dtype)
    return buf, on_device(buf, dev)
'''


def run(folder: pathlib.Path, body: str, **env: str) -> str:
    """Run PRELUDE + body in a subprocess whose libcuda.so.1 is the fake in
    `folder`; fail with its output unless it exits 0."""
    code = PRELUDE + textwrap.dedent(body) + "\ncheck_clean()\n"
    paths = [str(folder), *filter(None, [os.environ.get("LD_LIBRARY_PATH")])]
    # tests/ on the path for the shared cases (cuda_layouts), after bridge's own folder
    py = os.pathsep.join([str(ROOT), str(HERE.parents[1]), *filter(None, [os.environ.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(paths), "PYTHONPATH": py,
                               **env})  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


# ------------------------------------------------------------ values


def test_every_layout_copies_like_numpy(fake):
    """clone (both formats), copy_ device->device, host->device and
    device->host, numpy(force=True) and the DLPack copies, for contiguous,
    transposed, sliced, stepped, negative-stride, 0-d and zero-size views, in
    several dtypes; every result equals NumPy's."""
    run(fake, """
    from cuda_layouts import DTYPES, LAYOUTS
    for dtype in DTYPES:
        for name, (view, np_view) in LAYOUTS.items():
            buf, x = device_buffer(dtype=dtype)
            t, want = view(x), np_view(buf)
            where = (dtype.__name__, name)
            assert t.is_cuda and t.shape == want.shape, where
            for fmt in (None, bridge.contiguous_format):
                c = t.clone() if fmt is None else t.clone(memory_format=fmt)
                assert c.is_cuda and c.data_ptr() != t.data_ptr() or c.numel() == 0, where
                assert np.array_equal(host_of(c), want), where
            assert t.contiguous().is_contiguous() and np.array_equal(host_of(t.contiguous()), want), where
            # device -> device into a fresh buffer, and into a transposed view of one
            out_buf, out = device_buffer(want.size, dtype)
            out_buf[...] = 0
            dst = out.reshape(want.shape)
            dst.copy_(t)
            assert np.array_equal(out_buf.reshape(want.shape), want), where
            if want.ndim == 2:
                out_buf[...] = 0
                dst = out.reshape(want.shape[::-1]).t()
                dst.copy_(t)
                assert np.array_equal(out_buf.reshape(want.shape[::-1]).T, want), where
            # host -> device into the view itself, device -> host out of it
            rng = np.random.default_rng(0)
            new = (rng.integers(0, 100, size=want.shape)).astype(dtype)
            t.copy_(bridge.from_numpy(new))
            assert np.array_equal(np_view(buf), new), where
            h = bridge.zeros(want.shape, dtype=t.dtype)
            h.copy_(t)
            assert np.array_equal(h.numpy(), new), where
            # DLPack: copy=True on the device, dl_device to the host
            same = bridge.from_dlpack(t.__dlpack__(max_version=(1, 3), copy=True))
            assert same.is_cuda and np.array_equal(host_of(same), new), where
            down = bridge.from_dlpack(t.__dlpack__(max_version=(1, 3), dl_device=(1, 0)))
            assert not down.is_cuda and np.array_equal(down.numpy(), new), where
    """)


def test_broadcasting_casts_and_python_values(fake):
    """copy_ broadcasts (as the host path does); a dtype cast or a Python value
    goes through host memory and is cast by NumPy."""
    run(fake, """
    buf, x = device_buffer()
    row_buf, row = device_buffer(12)
    row_buf[...] = np.arange(100, 112)
    x.reshape(10, 12).copy_(row)
    assert np.array_equal(buf.reshape(10, 12), np.broadcast_to(row_buf, (10, 12)))
    reset()
    ints_buf, ints = device_buffer(120, np.int32)
    ints_buf[...] = np.arange(120) * 3
    x.copy_(ints)  # int32 -> float32: down, cast on the host, up
    assert np.array_equal(buf, np.arange(120) * 3.0)
    assert [c.split()[0] for c in calls()] == ["cuMemcpyDtoHAsync_v2", "cuMemcpyHtoDAsync_v2"]
    x.reshape(10, 12)[:, 3].copy_(-1.5)
    assert (buf.reshape(10, 12)[:, 3] == -1.5).all() and buf.reshape(10, 12)[0, 4] == 12
    x[:3].copy_([7, 8, 9])
    assert buf[:3].tolist() == [7, 8, 9]
    h = bridge.zeros(120, dtype=bridge.int64)
    h.copy_(x)  # device float32 -> host int64
    assert h.tolist() == buf.astype(np.int64).tolist()
    ints.copy_(bridge.from_numpy(np.arange(120) / 2))  # host float64 -> device int32
    assert ints_buf.tolist() == (np.arange(120) / 2).astype(np.int32).tolist()
    """)


def test_overlapping_source_and_destination(fake):
    """A source that shares bytes with its destination is read whole first
    (through the host), as NumPy does; the engine is never asked to overlap."""
    run(fake, """
    buf, x = device_buffer(10)
    x[1:].copy_(x[:-1])
    assert buf.tolist() == [0, 0, 1, 2, 3, 4, 5, 6, 7, 8]
    buf[...] = np.arange(10)
    x[:-1].copy_(x[1:])
    assert buf.tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 9]
    m_buf, m = device_buffer(16)
    m.reshape(4, 4).copy_(m.reshape(4, 4).t())  # a transpose in place
    assert m_buf.reshape(4, 4).tolist() == np.arange(16).reshape(4, 4).T.tolist()
    """)


def test_copies_between_two_devices_come_through_the_host(fake):
    run(fake, """
    a_buf, a = device_buffer(24, dev=0)
    b_buf, b = device_buffer(24, dev=1)
    b_buf[...] = 0
    reset()
    b.reshape(4, 6).copy_(a.reshape(4, 6))
    assert np.array_equal(b_buf, a_buf)
    assert [(c.split()[0], c.split()[-1]) for c in calls()] == [
        ("cuMemcpyDtoHAsync_v2", "dev=0"), ("cuMemcpyHtoDAsync_v2", "dev=1")]
    c = bridge.from_dlpack(a.__dlpack__(max_version=(1, 3), dl_device=(2, 1)))
    assert c.device == bridge.device("cuda:1") and np.array_equal(host_of(c), a_buf)
    """)


# ------------------------------------------------------ the driver calls


def test_contiguous_copies_are_one_call_each(fake):
    run(fake, """
    buf, x = device_buffer()
    reset()
    c = x.reshape(10, 12).clone()
    assert log()[-2:] == ["cuMemAlloc bytes=480 dev=0", "cuMemcpyDtoDAsync_v2 bytes=480 stream=1 dev=0"]
    assert c.untyped_storage().owner.__class__.__name__ == "CudaBlock" and c.untyped_storage()._stream == 1
    reset()
    x.reshape(10, 12).t().clone()  # preserve_format keeps the transpose: one span
    assert calls() == ["cuMemcpyDtoDAsync_v2 bytes=480 stream=1 dev=0"]
    reset()
    h = x.numpy(force=True)
    assert calls() == ["cuMemcpyDtoHAsync_v2 bytes=480 stream=1 dev=0"] and h.tolist() == buf.tolist()
    assert log()[-1] == "cuStreamSynchronize stream=1 dev=0"  # host memory: done on return
    reset()
    x.copy_(bridge.arange(120, dtype=bridge.float32))
    assert calls() == ["cuMemcpyHtoDAsync_v2 bytes=480 stream=1 dev=0"]
    assert log()[-1] == "cuStreamSynchronize stream=1 dev=0"
    reset()
    x[7].clone()  # 0-d
    assert calls() == ["cuMemcpyDtoDAsync_v2 bytes=4 stream=1 dev=0"]
    del c
    import gc; gc.collect()
    reset()
    z = x[:0].clone()
    assert z.is_cuda and z.numel() == 0 and log() == []  # nothing to copy: no driver call
    x.reshape(10, 12)[:, 4:4].copy_(bridge.zeros(10, 0))
    assert log() == []
    """)


def test_pitched_rows_and_loops(fake):
    """A row-strided 2-D view is one cuMemcpy2DAsync_v2 with the view's pitch;
    an N-d view with a contiguous innermost dim is a loop of them."""
    run(fake, """
    buf, x = device_buffer()
    reset()
    c = x.reshape(10, 12)[:, 2:9].contiguous()
    assert calls() == ["cuMemcpy2DAsync_v2 D<-D width=28 height=10 dpitch=28 spitch=48 stream=1 dev=0"]
    assert np.array_equal(host_of(c), buf.reshape(10, 12)[:, 2:9])
    reset()
    x.reshape(10, 12)[:, 2:9].copy_(bridge.ones(10, 7))
    assert calls() == ["cuMemcpy2DAsync_v2 D<-H width=28 height=10 dpitch=48 spitch=28 stream=1 dev=0"]
    reset()
    x.reshape(10, 12)[:, 2:9].numpy(force=True)
    assert calls() == ["cuMemcpy2DAsync_v2 H<-D width=28 height=10 dpitch=28 spitch=48 stream=1 dev=0"]
    reset()
    x.reshape(2, 3, 4, 5)[:, 1:, :, 1:4].contiguous()
    assert calls() == ["cuMemcpy2DAsync_v2 D<-D width=12 height=8 dpitch=12 spitch=20 stream=1 dev=0"] * 2
    reset()
    x.reshape(10, 12)[:, 2:9].t().contiguous()  # a transpose: down, re-laid on the host, up
    assert calls() == ["cuMemcpyDtoHAsync_v2 bytes=460 stream=1 dev=0", "cuMemcpyHtoDAsync_v2 bytes=280 stream=1 dev=0"]
    reset()
    before = buf.copy()
    x.reshape(10, 12)[:, ::2].copy_(bridge.zeros(10, 6))  # a stepped destination: rows of one element
    assert calls() == ["cuMemcpy2DAsync_v2 D<-H width=4 height=60 dpitch=8 spitch=4 stream=1 dev=0"]
    assert (buf[::2] == 0).all() and np.array_equal(buf[1::2], before[1::2])  # its gaps untouched
    row_buf, row = device_buffer(12)
    reset()
    x.reshape(10, 12).copy_(row)  # a broadcast source: a loop of rows
    assert calls() == ["cuMemcpyDtoDAsync_v2 bytes=48 stream=1 dev=0"] * 10
    reset()
    x.reshape(10, 12).copy_(x[:12])  # ... that overlaps the destination: read whole first
    assert calls() == ["cuMemcpyDtoHAsync_v2 bytes=48 stream=1 dev=0", "cuMemcpyHtoDAsync_v2 bytes=480 stream=1 dev=0"]
    assert np.array_equal(buf.reshape(10, 12), np.broadcast_to(buf[:12], (10, 12)))
    reset()
    x.reshape(10, 12).copy_(bridge.arange(12.0, dtype=bridge.float32))  # a host row: re-laid, one call
    assert calls() == ["cuMemcpyHtoDAsync_v2 bytes=480 stream=1 dev=0"]
    assert np.array_equal(buf.reshape(10, 12), np.broadcast_to(np.arange(12.0), (10, 12)))
    """)


def test_pitches_over_the_devices_maximum_are_loops(fake):
    run(fake, """
    buf, x = device_buffer()
    reset()
    c = x.reshape(10, 12)[:, 2:9].contiguous()  # a pitch of 48 > 40
    assert calls() == ["cuMemcpyDtoDAsync_v2 bytes=28 stream=1 dev=0"] * 10
    assert np.array_equal(host_of(c), buf.reshape(10, 12)[:, 2:9])
    reset()
    x.reshape(12, 10)[:, 2:9].contiguous()  # 40 is allowed
    assert calls() == ["cuMemcpy2DAsync_v2 D<-D width=28 height=12 dpitch=28 spitch=40 stream=1 dev=0"]
    """, FAKE_CUDA_MAX_PITCH="40")


def test_the_dlpack_copies_use_the_same_engine(fake):
    run(fake, """
    buf, x = device_buffer()
    t = x.reshape(10, 12)[:, ::2]
    reset()
    same = bridge.from_dlpack(t.__dlpack__(max_version=(1, 3), copy=True))
    # the span the view reaches, in one call; the copy keeps the view's strides
    assert calls() == ["cuMemcpyDtoDAsync_v2 bytes=476 stream=1 dev=0"] and same.stride() == (12, 2)
    reset()
    h = np.from_dlpack(t, device="cpu")
    assert calls() == ["cuMemcpyDtoHAsync_v2 bytes=476 stream=1 dev=0"] and h.tolist() == buf.reshape(10, 12)[:, ::2].tolist()
    reset()
    up = bridge.from_dlpack(np.arange(6.0).reshape(2, 3), device="cuda")
    assert calls() == ["cuMemcpyHtoDAsync_v2 bytes=48 stream=1 dev=0"] and up.is_cuda
    assert host_of(up).tolist() == [[0, 1, 2], [3, 4, 5]]
    """)


def test_streams_are_ordered_as_the_dlpack_copies_order_them(fake):
    """Device copies run on the thread's consumer stream after the work on both
    storages' streams (an event), asynchronously; a copy to the host runs on
    the source's stream and is synchronised; a copy from the host is
    synchronised on the consumer stream."""
    run(fake, """
    buf, x = device_buffer()
    with bridge.cuda_stream(99):
        x = on_device(buf)  # its storage's work is on stream 99
    assert x.untyped_storage()._stream == 99
    reset()
    with bridge.cuda_stream(77):
        c = x.clone()
    assert [l.split(" event=")[0] for l in log() if l.startswith(("cuEvent", "cuStream"))] == [
        "cuEventRecord", "cuStreamWaitEvent stream=77"]
    assert "stream=99" in log()[-3] and calls() == ["cuMemcpyDtoDAsync_v2 bytes=480 stream=77 dev=0"]
    assert c.untyped_storage()._stream == 77 and not [l for l in log() if "Synchronize" in l]
    reset()
    x.numpy(force=True)
    assert calls() == ["cuMemcpyDtoHAsync_v2 bytes=480 stream=99 dev=0"]
    assert log()[-1] == "cuStreamSynchronize stream=99 dev=0" and not [l for l in log() if "Event" in l]
    reset()
    with bridge.cuda_stream(77):
        x.copy_(bridge.zeros(120))
    assert calls() == ["cuMemcpyHtoDAsync_v2 bytes=480 stream=77 dev=0"]
    assert log()[-1] == "cuStreamSynchronize stream=77 dev=0"
    assert x.untyped_storage()._stream == 77  # the destination's last work
    reset()
    with bridge.cuda_stream(77):
        x.copy_(c)  # both storages on 77 now: nothing to wait for
    assert not [l for l in log() if "Event" in l]
    """)


def test_clones_own_their_memory(fake):
    run(fake, """
    import gc
    buf, x = device_buffer()
    blocks = fake.fake_live_blocks()
    c = x.clone()
    v = c[3:]
    del c
    gc.collect()
    assert fake.fake_live_blocks() == blocks + 1 and host_of(v).tolist() == buf[3:].tolist()
    reset()
    del v
    gc.collect()
    assert fake.fake_live_blocks() == blocks and log() == ["cuMemFree bytes=480 dev=0"]
    """)


# ------------------------------------------------------------ errors


def test_driver_failures_surface_with_the_error_name(fake):
    run(fake, """
    import pytest
    buf, x = device_buffer()
    fail("cuMemcpyDtoDAsync_v2", 700)
    with pytest.raises(RuntimeError, match=r"cuMemcpyDtoDAsync failed: CUDA_ERROR_ILLEGAL_ADDRESS \\(CUDA error 700"):
        x.clone()
    fail("cuMemcpy2DAsync_v2", 1)
    with pytest.raises(RuntimeError, match="cuMemcpy2DAsync failed: CUDA_ERROR_INVALID_VALUE"):
        x.reshape(10, 12)[:, 2:9].copy_(bridge.zeros(10, 7))
    fail("cuStreamSynchronize", 700)
    with pytest.raises(RuntimeError, match="cuStreamSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS"):
        x.numpy(force=True)
    fail("cuMemcpyDtoHAsync_v2", 700, skip=0)
    with pytest.raises(RuntimeError, match="cuMemcpyDtoHAsync failed"):
        x.reshape(10, 12).t().contiguous()  # the staging download
    fail("cuEventRecord", 700)
    with bridge.cuda_stream(5):
        with pytest.raises(RuntimeError, match="recording an event on the producer's stream failed"):
            x.clone()
    fail("cuMemAlloc_v2", 2)
    with pytest.raises(MemoryError, match="cuMemAlloc of 480 bytes on cuda:0 failed"):
        x.clone()
    # DLPack keeps BufferError for what cannot be exported
    fail("cuMemcpyDtoDAsync_v2", 700)
    with pytest.raises(BufferError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        x.__dlpack__(max_version=(1, 3), copy=True)
    # the failures left nothing behind: the next copies work
    assert np.array_equal(host_of(x.reshape(10, 12).t().contiguous()), buf.reshape(10, 12).T)
    """)


def test_a_driver_without_the_copy_function_or_a_device(fake, fake_without_2d):
    body = """
    import pytest
    buf = np.arange(6, dtype=np.float32)
    x = _C.from_memory(buf.ctypes.data, bridge.float32, (6,), (4,), buf, False, (2, 0))
    for copy in (x.clone, lambda: x.copy_(bridge.zeros(6)), lambda: bridge.zeros(6).copy_(x),
                 lambda: x.numpy(force=True)):
        with pytest.raises(RuntimeError, match="need the CUDA driver: {match}"):
            copy()
    with pytest.raises(BufferError, match="need the CUDA driver: {match}"):
        x.__dlpack__(max_version=(1, 3), copy=True)
    assert x[:0].clone().numel() == 0  # an empty copy asks the driver for nothing
    """
    run(fake_without_2d, body.format(match="the CUDA driver lacks cuMemcpy2DAsync_v2"))
    run(fake, body.format(match="cuInit failed: no usable CUDA device"), FAKE_CUDA_NO_DEVICE="1")


def test_wrong_arguments(fake):
    run(fake, """
    import pytest
    buf, x = device_buffer()
    ints = on_device(np.zeros(120, np.int32))
    with pytest.raises(ValueError, match="one dtype"):
        _C.cuda_copy(x, ints)
    with pytest.raises(ValueError, match=r"cannot broadcast a value of shape \\(7,\\) to shape \\(10, 12\\)"):
        x.reshape(10, 12).copy_(x[:7])
    with pytest.raises(ValueError, match="cannot broadcast"):
        _C.cuda_copy(x[:12], x.reshape(10, 12))
    ro = np.zeros(4, np.float32)
    on_device(ro)
    r = _C.from_memory(ro.ctypes.data, bridge.float32, (4,), (4,), ro, True, (2, 0))
    with pytest.raises(ValueError, match="read-only"):
        r.copy_(x[:4])
    with pytest.raises(ValueError, match="read-only"):
        _C.cuda_copy(r, x[:4])
    with pytest.raises(TypeError, match="bridge.Tensor"):
        _C.cuda_copy(x, np.zeros(120, np.float32))
    with pytest.raises(TypeError, match="2 arguments"):
        _C.cuda_copy(x)
    with pytest.raises(ValueError, match="takes a CUDA tensor"):
        _C.cuda_clone(bridge.zeros(3), (1,))
    with pytest.raises(ValueError, match="dense layout"):
        _C.cuda_clone(x.reshape(10, 12), (24, 1))
    with pytest.raises(ValueError, match="2 strides for a 1-d"):
        _C.cuda_clone(x, (1, 1))
    with pytest.raises(RuntimeError, match="between host and CUDA memory"):
        _C.cuda_copy(bridge.zeros(3), bridge.zeros(3))
    rocm = _C.from_memory(buf.ctypes.data, bridge.float32, (3,), (4,), buf, False, (10, 0))
    with pytest.raises(RuntimeError, match="rocm:0"):
        x[:3].copy_(rocm)
    with pytest.raises(RuntimeError, match="rocm:0"):
        rocm.numpy(force=True)
    """)


def test_without_a_driver_in_this_process():
    """This process loaded no fake: copies need the real driver, and where
    there is none they say so (device memory is never read on the host)."""
    import ctypes.util

    from bridge.core.native import _C

    t = _C.from_memory(0xDEAD0000, bridge.float32, (2, 3), (12, 4), object(), False, (2, 0))
    assert t[:, :0].clone().numel() == 0  # nothing to copy: no driver needed
    if ctypes.util.find_library("cuda") is None:
        for copy in (t.clone, t.t().contiguous, lambda: bridge.zeros(2, 3).copy_(t), lambda: t.numpy(force=True)):
            with pytest.raises(RuntimeError, match="need the CUDA driver"):
                copy()
    assert "cuda_clone" not in _C.UPCALLS and "cuda_copy" not in _C.UPCALLS  # one mechanism, in C


def test_convert_moves_and_casts_on_the_way(fake):
    """convert(device=...) moves between host and CUDA in one copy through the
    copy engine, dtype= casts on the way (through the host for device memory)."""
    run(fake, """
    import warnings
    from bridge.crossing.convert import plan
    warnings.simplefilter("error", bridge.CopyWarning)  # asked for: named in the plan, never warned
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    reset()
    up = bridge.convert(a, bridge, device="cuda")
    assert up.device == bridge.device("cuda", 0) and up.shape == (3, 4)
    assert [c.split()[0] for c in calls()] == ["cuMemcpyHtoDAsync_v2"]  # one copy
    assert np.array_equal(host_of(up), a)
    down = bridge.convert(up, np, device="cpu")
    assert isinstance(down, np.ndarray) and np.array_equal(down, a)
    reset()
    cast = bridge.convert(a.T, bridge, device=(2, 0), dtype=bridge.float64)
    assert cast.dtype == bridge.float64 and cast.is_contiguous() and np.array_equal(host_of(cast), a.T)
    assert len(calls("cuMemcpyHtoD")) == 1
    same = bridge.convert(up, bridge, device="cuda:0")
    assert same.data_ptr() == up.data_ptr()  # already there: nothing moved
    on_dev = bridge.convert(up, bridge, dtype="int32")  # a cast of device memory, through the host
    assert on_dev.device == up.device and host_of(on_dev).tolist() == a.astype(np.int32).tolist()
    assert [f.kind for f in plan(a, bridge, device="cuda").fixes] == ["device"]
    """)
