"""The emulation worker's batched requests: fewer round trips, no pipe deadlock, nothing leaked."""

from __future__ import annotations

import errno

import numpy as np
import pytest

from asm.aarch64 import Assembler, post, v0, v1, x0, x1, x2, x3
from minijit.runtime import emulator, runs_natively
from minijit.runtime.emulator import PAGE, PROT_READ, EmulatedKernel, Worker
from minijit.runtime.harness import CMD_READ

pytestmark = pytest.mark.skipif(runs_natively("aarch64"), reason="host runs AArch64 natively")


@pytest.fixture
def private_worker():
    w = Worker(128, timeout=60, idle_timeout=1)
    yield w
    w.close()


def count_round_trips(w: Worker, monkeypatch) -> list[int]:
    """A list that gets one entry per write of requests to ``w`` (each a wait for replies)."""
    sent: list[int] = []
    write = w._write_requests

    def counting(proc, data):
        sent.append(len(data))
        return write(proc, data)

    monkeypatch.setattr(w, "_write_requests", counting)
    return sent


def add3() -> Assembler:
    """void f(const float* a, const float* b, float* c, int64_t n): c = a + b (n a multiple of 4)."""
    a = Assembler()
    loop, done = a.new_label("loop"), a.new_label("done")
    a.bind(loop)
    a.cbz(x3, done)
    a.ld1(v0.s4, post(x0, 16))
    a.ld1(v1.s4, post(x1, 16))
    a.fadd(v0.s4, v0.s4, v1.s4)
    a.st1(v0.s4, post(x2, 16))
    a.sub(x3, x3, 4)
    a.b(loop)
    a.bind(done)
    a.ret()
    return a


def test_a_call_with_three_arrays_takes_three_round_trips(monkeypatch):
    """Map the regions, copy in and call, copy out: three waits for the worker (it took eleven
    with one request per round trip); the results are unchanged."""
    k = EmulatedKernel(add3().code(), "void(const float*, const float*, float*, int64_t)")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
    c = np.zeros(1000, np.float32)
    k(a, b, c, 1000)  # the worker is started and the code placed
    sent = count_round_trips(k.worker, monkeypatch)
    c[:] = 0
    k(a, b, c, 1000)
    np.testing.assert_array_equal(c, a + b)
    assert len(sent) == 3


def returns_first_argument() -> Assembler:
    a = Assembler()
    a.ret()  # x0 is the first argument
    return a


def is_mapped(w: Worker, address: int) -> bool:
    try:
        w.mprotect(address, PAGE, PROT_READ)
    except OSError as e:
        assert e.errno == errno.ENOMEM
        return False
    return True


def test_regions_of_a_call_are_unmapped_with_the_next_request():
    k = EmulatedKernel(returns_first_argument().code(), "int64_t(float*)")
    w = k.worker
    x = np.arange(3000, dtype=np.float32)
    address = k(x)  # the worker address of x's region
    assert address % PAGE == 0 and w._retired  # the region starts the mapping; released, not yet unmapped
    assert not is_mapped(w, address)  # released by the call, unmapped before the mprotect ran
    assert len(w._retired) == 0


def test_large_batches_are_split_and_do_not_deadlock(private_worker):
    """Big reads and big writes in one batch: requests and replies each overflow their pipe, so
    the batch goes out in parts (written whole, the worker would block on its full reply pipe
    while the host blocks on the full request pipe)."""
    w = private_worker
    sizes = [70_000 + 4096 * i for i in range(6)]
    addresses = w.mmap_many(sizes)
    rng = np.random.default_rng(1)
    data = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in sizes]
    w.write_many(list(zip(addresses, data, strict=True)))
    new = [bytes(reversed(d)) for d in data]
    requests = []
    for address, size, d in zip(addresses, sizes, new, strict=True):
        requests += [(CMD_READ, (address, size), b"", size), emulator._write(address, d)]
    replies = w._exchange(requests)
    assert replies[0::2] == data
    assert w.read_many(list(zip(addresses, sizes, strict=True))) == new
    assert w.read_many([(addresses[0], 0), (addresses[1], 5)]) == [b"", new[1][:5]]
    for address, size in zip(addresses, sizes, strict=True):
        w.munmap(address, size)


def test_mmap_many_failure_raises_and_releases_the_others(private_worker):
    w = private_worker
    with pytest.raises(OSError, match="syscall 222 failed in the emulation worker") as info:
        w.mmap_many([PAGE, 1 << 62, PAGE])
    assert info.value.errno == errno.ENOMEM
    released = [address for address, _ in w._retired]
    assert len(released) == 2
    assert not any(is_mapped(w, address) for address in released)
