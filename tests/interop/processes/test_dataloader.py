"""torch's DataLoader batches bridge tensors (bridge.interop.processes.collate_tensors):
``default_collate`` stacks them into a bridge tensor, in a worker process straight
into shared memory, which reaches the main process without a copy; bridge
registers with torch's collate map without importing torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import bridge
from bridge.interop.processes import collate_tensors

TIMEOUT = 120


class Squares:
    """A map-style dataset of bridge tensors (module level: workers unpickle it
    under spawn and forkserver)."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> dict:
        return {"x": bridge.full((4,), float(i), dtype=bridge.float32), "label": i}


def shared_in_worker(batch):
    """The default collate function, checked where it runs: in a worker the
    batch is already in shared memory, so pickling it for the main process
    moves nothing (what torch does for its own tensors)."""
    import torch.utils.data

    out = torch.utils.data.default_collate(batch)
    info = torch.utils.data.get_worker_info()
    assert info is not None, "collate ran in the main process"
    assert isinstance(out["x"], bridge.Tensor) and out["x"].is_shared()
    out["worker"] = info.id
    return out


def test_default_collate_stacks_bridge_tensors_into_a_bridge_tensor(torch):
    from torch.utils.data import default_collate

    batch = [bridge.arange(i, i + 3, dtype=bridge.float64) for i in range(4)]
    out = default_collate(batch)
    assert isinstance(out, bridge.Tensor)
    assert out.shape == (4, 3) and out.dtype is bridge.float64 and out.is_contiguous()
    assert out.tolist() == [[i + j for j in range(3)] for i in range(4)]
    assert not out.is_shared()  # the main process: ordinary memory, as torch's
    batch[0][0] = 99.0  # a new tensor: the inputs are copied, not viewed
    assert out[0, 0].item() == 0.0
    # nested in the structures default_collate walks, next to other types
    nested = default_collate([{"x": bridge.ones(2), "y": (bridge.zeros(1), i)} for i in range(3)])
    assert isinstance(nested["x"], bridge.Tensor) and nested["x"].shape == (3, 2)
    assert isinstance(nested["y"][0], bridge.Tensor) and nested["y"][0].shape == (3, 1)
    assert isinstance(nested["y"][1], torch.Tensor) and nested["y"][1].tolist() == [0, 1, 2]
    # views and read-only tensors are sources like any other
    base = bridge.arange(12).reshape(3, 4)
    assert default_collate([base[:, 1], base[:, 2]]).tolist() == [[1, 5, 9], [2, 6, 10]]
    ro = bridge.from_dlpack(torch.arange(2.0).numpy().copy())
    assert default_collate([ro, ro]).tolist() == [[0.0, 1.0], [0.0, 1.0]]


def test_collate_refuses_what_it_cannot_stack(torch):
    from torch.utils.data import default_collate

    with pytest.raises(ValueError, match=r"equal shape; index 0 has \(2,\), index 1 has \(3,\)"):
        default_collate([bridge.zeros(2), bridge.zeros(3)])
    with pytest.raises(TypeError, match=r"one dtype; index 0 is bridge\.float32, index 1 is bridge\.int64"):
        default_collate([bridge.zeros(2), bridge.zeros(2, dtype=bridge.int64)])
    with pytest.raises(TypeError, match="holds a list at index 1"):
        default_collate([bridge.zeros(2), [0.0, 0.0]])
    with pytest.raises(ValueError, match="at least one"):
        collate_tensors([])


def test_collate_refuses_device_tensors(torch):
    from torch.utils.data import default_collate

    class Fake:
        """CUDA memory that is never touched: bridge imports the interface only."""

        @property
        def __cuda_array_interface__(self) -> dict:
            return {"shape": (2,), "typestr": "<f4", "data": (1 << 40, False), "version": 3,
                    "strides": None, "stream": None}  # fmt: skip

    t = bridge.from_cuda_array_interface(Fake())
    with pytest.raises(ValueError, match="host memory; the tensor at index 0 is on cuda:0"):
        default_collate([t, t])


# Under make test-parallel the fork case runs on one thread.
FORKS = pytest.mark.thread_unsafe(
    reason="forks this process: a fork from one of several test threads copies the others mid-test, "
    "with any lock they hold"
)


@pytest.mark.parametrize("method", [pytest.param("fork", marks=FORKS), "spawn"])
def test_dataloader_with_two_workers_batches_bridge_tensors_in_shared_memory(torch, method):
    from torch.utils.data import DataLoader

    loader = DataLoader(Squares(), batch_size=4, num_workers=2, collate_fn=shared_in_worker,
                        multiprocessing_context=method, timeout=TIMEOUT)  # fmt: skip
    batches = list(loader)
    assert [b["label"].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert {b["worker"] for b in batches} == {0, 1}
    for b in batches:
        x = b["x"]
        assert isinstance(x, bridge.Tensor) and x.dtype is bridge.float32
        assert x.tolist() == [[float(i)] * 4 for i in b["label"].tolist()]
        # arrived as the worker's shared memory, mapped here
        assert x.is_shared() and type(x.untyped_storage().owner).__name__ == "SharedMemoryBlock"
    # the default collate function too, with no check of ours in the worker
    plain = list(DataLoader(Squares(), batch_size=5, num_workers=2, multiprocessing_context=method,
                            timeout=TIMEOUT))  # fmt: skip
    assert [b["x"].shape for b in plain] == [(5, 4), (5, 4)] and all(b["x"].is_shared() for b in plain)


@pytest.mark.parametrize("torch_first", [False, True], ids=["bridge-then-torch", "torch-then-bridge"])
def test_registration_does_not_import_torch(torch, torch_first):
    """bridge registers when torch's collate module runs, whichever comes first,
    and importing bridge alone loads no torch module."""
    first, second = ("import torch", "import bridge") if torch_first else ("import bridge", "import torch")
    code = textwrap.dedent(f"""
        import sys
        {first}
        if "torch" not in sys.modules:
            assert not [m for m in sys.modules if m.split(".")[0] == "torch"]
        {second}
        from torch.utils.data import default_collate
        from bridge.interop.processes import collate_tensors
        from torch.utils.data._utils.collate import default_collate_fn_map
        assert default_collate_fn_map[bridge.Tensor] is collate_tensors
        out = default_collate([bridge.arange(2), bridge.arange(2)])
        assert isinstance(out, bridge.Tensor) and out.tolist() == [[0, 1], [0, 1]]
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr
