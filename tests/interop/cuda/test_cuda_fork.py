"""CUDA in a forked child: the CUDA driver does not survive fork, so a child
forked after its parent initialised it sees CUDA as unavailable, with the
reason (a BufferError or RuntimeError naming the fork), never a hang or a call
through the parent's contexts; its host work is unaffected. A child forked
before the parent touched CUDA loads the driver itself. Run against the fake
driver of test_cuda_copy (no GPU needed)."""

from __future__ import annotations

import os
import textwrap

import pytest
from test_cuda_copy import fake, run  # noqa: F401  (fake: the fixture, a folder with the fake libcuda.so.1)

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX's"),
    pytest.mark.thread_unsafe(reason="forks"),
]

FORK = r'''
import os, pickle
def in_child(body):
    """Run body() in a forked child; its exit status (0: it passed)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 1
        try:
            out = body()
            os.write(w, pickle.dumps(out))
            code = 0
        except BaseException as e:
            os.write(w, pickle.dumps(e))
        finally:
            os._exit(code)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    return pickle.loads(data), os.WEXITSTATUS(status)
'''


def test_a_child_forked_after_cuda_was_initialised_refuses_cuda_by_name(fake):  # noqa: F811
    run(fake, FORK + textwrap.dedent(r'''
        buf, d = device_buffer(64)
        assert np.array_equal(host_of(d.clone()), buf)  # the parent initialised the driver
        calls_before = len(log())

        def cuda_work():
            return host_of(d.clone())
        err, status = in_child(cuda_work)
        assert status == 1 and isinstance(err, (BufferError, RuntimeError)), (status, err)
        assert "forked after its parent initialised CUDA" in str(err) and "spawn" in str(err), err

        def host_work():
            t = bridge.arange(1 << 20, dtype=bridge.float32)
            return t.reshape((1024, 1024)).t().contiguous()[3, 2].item()
        value, status = in_child(host_work)
        assert status == 0 and value == 2 * 1024 + 3, (status, value)
        assert len(log()) == calls_before  # the children made no driver call in the parent's name
        assert np.array_equal(host_of(d.clone()), buf)  # the parent's CUDA is untouched
    '''))


def test_a_child_forked_before_cuda_was_touched_loads_the_driver_itself(fake):  # noqa: F811
    run(fake, FORK + textwrap.dedent(r'''
        def cuda_work():
            buf, d = device_buffer(32)
            return host_of(d.clone()).tolist() == buf.tolist()
        ok, status = in_child(cuda_work)
        assert status == 0 and ok is True, (status, ok)
    '''))
