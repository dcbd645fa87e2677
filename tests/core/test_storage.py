"""UntypedStorage: allocation, foreign memory, files, shared memory, lifetimes."""

from __future__ import annotations

import array
import gc
import itertools
import mmap
import os
import stat
import subprocess
import sys
import weakref

import numpy as np
import pytest

import bridge
from bridge import UntypedStorage
from bridge.core.owners import ARENA_NBYTES, ARENA_SLICE_MAX


def test_allocation_is_aligned_and_sized():
    for n in (0, 1, 63, 64, 1000, 1 << 20):
        s = UntypedStorage(n)
        assert s.nbytes() == s.size() == len(s) == n
        assert s.data_ptr() % 64 == 0
        assert s.device == bridge.device("cpu") and not s.is_cuda
        assert s.resizable() and not s.is_shared() and not s.is_readonly
        assert s.element_size() == 1


def test_sequence_constructor_copies():
    s = UntypedStorage([1, 2, 255])
    assert s.tolist() == [1, 2, 255]
    assert UntypedStorage(b"ab").tolist() == [97, 98]


def test_bad_sizes_and_values():
    with pytest.raises(ValueError, match="non-negative"):
        UntypedStorage(-1)
    with pytest.raises(ValueError, match=r"0\.\.255"):
        UntypedStorage([256])
    with pytest.raises(TypeError):
        UntypedStorage(1.5)
    with pytest.raises(RuntimeError, match="only CPU"):
        UntypedStorage(4, device="cuda")
    with pytest.raises(ValueError):
        UntypedStorage(4, device="nonsense")


def test_getitem_setitem_fill_tolist():
    s = UntypedStorage(4).fill_(7)
    assert s.tolist() == [7, 7, 7, 7]
    s[1] = 9
    s[-1] = 3
    assert s[1] == 9 and s[3] == 3 and s[-4] == 7
    with pytest.raises(IndexError):
        s[4]
    with pytest.raises(IndexError):
        s[4] = 1
    with pytest.raises(ValueError):
        s.fill_(300)


def test_slice_is_a_view():
    s = UntypedStorage(8).fill_(0)
    v = s[2:5]
    assert v.nbytes() == 3 and v.data_ptr() == s.data_ptr() + 2
    v.fill_(5)
    assert s.tolist() == [0, 0, 5, 5, 5, 0, 0, 0]
    assert not v.resizable()
    with pytest.raises(ValueError, match="step 1"):
        s[::2]


def test_clone_and_copy():
    s = UntypedStorage([1, 2, 3])
    c = s.clone()
    assert c.tolist() == [1, 2, 3] and c.data_ptr() != s.data_ptr()
    c.fill_(0)
    assert s.tolist() == [1, 2, 3]
    c.copy_(s)
    assert c.tolist() == [1, 2, 3]
    with pytest.raises(ValueError, match="size mismatch"):
        c.copy_(UntypedStorage(4))
    with pytest.raises(TypeError):
        c.copy_(b"abc")


def test_resize_keeps_prefix():
    s = UntypedStorage([1, 2, 3])
    t = bridge.tensor([0], dtype=bridge.uint8)
    t.set_(s)
    s.resize_(5)
    assert s.nbytes() == 5 and s.tolist()[:3] == [1, 2, 3]
    assert t.untyped_storage() is s
    s.resize_(2)
    assert s.tolist() == [1, 2]
    with pytest.raises(ValueError):
        s.resize_(-1)


def test_resize_of_foreign_storage_raises():
    s = UntypedStorage.from_buffer(bytearray(4))
    with pytest.raises(ValueError, match="did not allocate"):
        s.resize_(8)


def test_byteswap():
    t = bridge.tensor([1, 256], dtype=bridge.int16)
    t.untyped_storage().byteswap(bridge.int16)
    assert t.tolist() == [256, 1]
    c = bridge.tensor([1 + 2j], dtype=bridge.complex64)
    c.untyped_storage().byteswap(bridge.complex64)
    c.untyped_storage().byteswap(bridge.float32)
    assert c.tolist() == [1 + 2j]
    with pytest.raises(ValueError, match="whole number"):
        UntypedStorage(3).byteswap(bridge.int16)


def test_repr_like_torch():
    s = UntypedStorage([1, 2])
    assert repr(s) == " 1\n 2\n[bridge.UntypedStorage(device=cpu) of size 2]"


class TestFromBuffer:
    def test_bytearray_is_shared_and_writable(self):
        buf = bytearray(b"abcd")
        s = UntypedStorage.from_buffer(buf)
        assert not s.is_readonly
        s[0] = ord("z")
        assert buf == bytearray(b"zbcd")
        # the owner holds the buffer exported: the bytearray cannot move its bytes
        with pytest.raises(BufferError):
            buf.append(1)
        del s
        gc.collect()
        buf.append(1)

    def test_bytes_stay_read_only(self):
        s = UntypedStorage.from_buffer(b"abcd")
        assert s.is_readonly
        with pytest.raises(ValueError, match="read-only"):
            s[0] = 1
        with pytest.raises(ValueError, match="read-only"):
            s.fill_(0)
        t = bridge.tensor([0], dtype=bridge.uint8).set_(s)
        with pytest.raises(ValueError, match="read-only"):
            t.fill_(1)
        assert not t.numpy().flags.writeable

    def test_offset_and_count(self):
        buf = bytearray(range(10))
        s = UntypedStorage.from_buffer(buf, offset=2, count=3)
        assert s.tolist() == [2, 3, 4]
        with pytest.raises(ValueError, match="exceeds"):
            UntypedStorage.from_buffer(buf, offset=8, count=5)
        with pytest.raises(ValueError, match="outside"):
            UntypedStorage.from_buffer(buf, offset=11)

    def test_other_exporters(self):
        a = array.array("i", [1, 2, 3])
        s = UntypedStorage.from_buffer(a)
        assert s.nbytes() == 12
        t = bridge.tensor([0], dtype=bridge.int32).set_(s)
        t[0] = 7
        assert a[0] == 7
        arr = np.arange(4, dtype=np.float64)
        assert UntypedStorage.from_buffer(arr).data_ptr() == arr.ctypes.data

    def test_keeps_buffer_alive(self):
        class Buf(bytearray):
            pass

        buf = Buf(16)
        ref = weakref.ref(buf)
        s = UntypedStorage.from_buffer(buf)
        del buf
        gc.collect()
        assert ref() is not None
        del s
        gc.collect()
        assert ref() is None

    def test_rejects_non_buffers_and_strided(self):
        with pytest.raises(TypeError, match="buffer protocol"):
            UntypedStorage.from_buffer([1, 2, 3])
        strided = memoryview(bytearray(8))[::2]
        with pytest.raises(ValueError, match="C-contiguous"):
            UntypedStorage.from_buffer(strided)


class TestFromFile:
    def test_private_mapping_never_writes_the_file(self, tmp_path):
        p = tmp_path / "data.bin"
        p.write_bytes(bytes(range(8)))
        s = UntypedStorage.from_file(str(p), shared=False)
        assert s.nbytes() == 8 and s.filename == str(p) and not s.is_shared()
        s[0] = 99
        assert s[0] == 99
        del s
        gc.collect()
        assert p.read_bytes() == bytes(range(8))

    def test_shared_mapping_writes_through(self, tmp_path):
        p = tmp_path / "data.bin"
        s = UntypedStorage.from_file(p, shared=True, nbytes=16)
        assert p.stat().st_size == 16 and s.is_shared()
        t = bridge.tensor([0], dtype=bridge.float32).set_(s)
        t.fill_(2.5)
        del s, t
        gc.collect()
        assert np.fromfile(p, dtype=np.float32).tolist() == [2.5] * 4

    def test_size_checks(self, tmp_path):
        p = tmp_path / "small.bin"
        p.write_bytes(b"ab")
        with pytest.raises(ValueError, match="fewer than"):
            UntypedStorage.from_file(p, shared=False, nbytes=10)
        with pytest.raises(ValueError, match="non-negative"):
            UntypedStorage.from_file(p, nbytes=-1)
        with pytest.raises(FileNotFoundError):
            UntypedStorage.from_file(tmp_path / "missing.bin")
        empty = tmp_path / "empty.bin"
        empty.write_bytes(b"")
        assert UntypedStorage.from_file(empty).nbytes() == 0

    def test_read_only_file_maps_privately(self, tmp_path):
        p = tmp_path / "ro.bin"
        p.write_bytes(b"\x01\x02")
        os.chmod(p, 0o444)
        s = UntypedStorage.from_file(p)
        s[0] = 5
        assert p.read_bytes() == b"\x01\x02"


class TestSharedMemory:
    def test_share_memory_moves_data(self):
        t = bridge.arange(10, dtype=bridge.int32)
        s = t.untyped_storage()
        before = s.data_ptr()
        assert s.share_memory_() is s and s.is_shared()
        assert s.data_ptr() != before
        assert t.tolist() == list(range(10))
        assert s.share_memory_() is s  # no-op the second time
        assert not s.resizable()

    @pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="POSIX shm is not under /dev/shm here")
    def test_block_has_no_name_and_closes_when_released(self):
        before = set(os.listdir("/dev/shm"))
        s = UntypedStorage(ARENA_SLICE_MAX + 1).share_memory_()  # a block of its own
        fd = s.owner.fd
        assert set(os.listdir("/dev/shm")) == before  # nameless: nothing that could leak
        assert stat.S_ISREG(os.fstat(fd).st_mode) and os.fstat(fd).st_size >= 32
        view = bridge.tensor([0], dtype=bridge.uint8).set_(s).numpy()
        del s
        gc.collect()
        os.fstat(fd)  # a NumPy view still holds the block (and its descriptor)
        del view
        gc.collect()
        with pytest.raises(OSError):
            os.fstat(fd)

    def test_another_process_sees_writes(self):
        s = UntypedStorage(8).fill_(0).share_memory_()
        offset = s.data_ptr() - s.owner.address  # a slice of an arena
        code = (
            "import mmap, sys, os\n"
            "fd = os.open(sys.argv[1], os.O_RDWR)\n"
            "m = mmap.mmap(fd, 0); m[int(sys.argv[2])] = 42; m.close(); os.close(fd)\n"
        )
        path = f"/proc/{os.getpid()}/fd/{s.owner.fd}"
        subprocess.run([sys.executable, "-c", code, path, str(offset)], check=True)
        assert s[0] == 42

    def test_small_storages_are_aligned_slices_of_one_arena(self):
        small = [UntypedStorage(n).fill_(i).share_memory_() for i, n in enumerate((1, 100, 4096, 0, 7))]
        blocks = {id(s.owner) for s in small}
        assert len(blocks) <= 2  # one arena, or two when the first filled up meanwhile
        assert all(s.data_ptr() % 64 == 0 for s in small)
        spans = sorted((s.data_ptr(), s.data_ptr() + s.nbytes()) for s in small if s.nbytes())
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))  # no two overlap
        assert [s.tolist() for s in small] == [[i] * n for i, n in enumerate((1, 100, 4096, 0, 7))]
        assert small[0].owner.nbytes == ARENA_NBYTES
        big = UntypedStorage(ARENA_SLICE_MAX + 1).share_memory_()
        assert big.owner.nbytes == ARENA_SLICE_MAX + 1 and big.data_ptr() == big.owner.address

    @pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
    @pytest.mark.thread_unsafe(reason="forks the test process: a fork from one of several test threads "
                               "copies the others mid-test, with any lock they hold (malloc's, the arena's)")
    def test_a_forked_child_carves_from_an_arena_of_its_own(self):
        parent = UntypedStorage(16).share_memory_()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its slice must not be the parent's next one
            child = UntypedStorage(16).fill_(1).share_memory_()
            os.write(w, b"1" if child.owner.fd != parent.owner.fd or
                     os.fstat(child.owner.fd).st_ino != os.fstat(parent.owner.fd).st_ino else b"0")
            os._exit(0)
        os.close(w)
        assert os.read(r, 1) == b"1"
        os.waitpid(pid, 0)
        os.close(r)
        mine = UntypedStorage(16).fill_(0).share_memory_()
        assert mine.tolist() == [0] * 16

    def test_foreign_storage_refuses_to_move(self):
        s = UntypedStorage.from_buffer(bytearray(8))
        with pytest.raises(ValueError, match="clone"):
            s.share_memory_()


def test_mmap_buffer_storage():
    m = mmap.mmap(-1, 16)
    s = UntypedStorage.from_buffer(m)
    s[3] = 1
    assert m[3] == 1


# ------------------------------------------------------------ issue 9


def test_from_file_of_a_directory_says_so(tmp_path):
    for shared in (False, True):
        with pytest.raises(IsADirectoryError, match="is a directory"):
            UntypedStorage.from_file(str(tmp_path), shared=shared)


@pytest.mark.parametrize("nbytes", [2**63, 2**64, 2**64 + 1, 2**100])
def test_sizes_past_int64_are_value_errors_naming_the_size(nbytes):
    with pytest.raises(ValueError, match=str(nbytes)):
        UntypedStorage(nbytes)
    s = UntypedStorage(8)
    with pytest.raises(ValueError, match=str(nbytes)):
        s.resize_(nbytes)
    assert s.nbytes() == 8  # unchanged


@pytest.mark.parametrize(
    "make",
    [
        lambda: bridge.empty(2**32, 2**32),  # 2**64 elements of 4 bytes
        lambda: bridge.zeros(2**61, 8, dtype=bridge.int64),
        lambda: bridge.ones(2**62, 2, dtype=bridge.int8),
        lambda: bridge.full((2**40, 2**30), 1.0),
        lambda: bridge.empty_strided((2, 2), (2**62, 1), dtype=bridge.int64),
        lambda: bridge.empty(2**64),
    ],
)
def test_factories_past_int64_are_value_errors(make):
    with pytest.raises(ValueError, match=r"larger than the \d+ bytes|18446744073709551616 does not fit"):
        make()


def test_own_allocations_are_freed_without_releasing_the_gil():
    """The owner of memory bridge allocated is a C capsule that frees in its
    destructor (a cffi ffi.gc callback drops the GIL, which ends a daemon
    thread that drops the last reference while the interpreter finalises)."""
    s = UntypedStorage(16)
    assert type(s.owner).__name__ == "PyCapsule" and "bridge.memory" in repr(s.owner)
    s.resize_(32)
    assert "bridge.memory" in repr(s.owner)


def test_buffer_views_in_a_reference_cycle_are_collected():
    """A view of a buffer export in a reference cycle: the collector frees it
    (it crashed the interpreter when the export was a memoryview, which the
    collector cleared while the view still pointed into it). In a subprocess."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import gc, bridge
        for make in (lambda: bridge.frombuffer(bytearray(16), dtype=bridge.float32),
                     lambda: bridge.UntypedStorage.from_buffer(bytearray(16)),
                     lambda: bridge.frombuffer(b"abcd", dtype=bridge.uint8)):
            for _ in range(100):
                c = [make()]
                c.append(c)
                del c
            gc.collect()
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.returncode, proc.stderr[-2000:])
