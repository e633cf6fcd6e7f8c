"""Collectives between processes on this host, and the launcher that runs a function on R ranks.

Two communicators behind one interface: torch.distributed with the gloo backend (when torch is installed),
or plain multiprocessing with a shared-memory segment (always available). Both operate on NumPy arrays
(gloo through zero-copy torch.from_numpy views), so the same rank code drives either.

Shared-memory algorithms (R ranks, a staging slot of ``slot_bytes`` per rank, long messages in pieces):
- allreduce: every rank copies its piece into its slot; barrier; rank r sums the r-th 1/R of all slots into
  a result area (reduce-scatter); barrier; every rank copies the result back (allgather). Two barriers and
  3 copies of the message per rank per piece.
- alltoall: every rank copies its R blocks into its slot; barrier; rank r copies block r of every slot
  into its receive buffer; barrier.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import platform
import shutil
import socket
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from dlrmsim.allocator import steady_allocator
from dlrmsim.calibration.backends import torch_available
from dlrmsim.errors import DlrmsimError
from dlrmsim.host import usable_cores

SLOT_BYTES = 64 * 2**20  # staging per rank: big enough that pieces amortize the two barriers
# The smallest slot a segment is cut down to where shared memory is scarce (a piece then still moves a megabyte
# between two barriers of some microseconds each).
MIN_SLOT_BYTES = 2**20
SHM_DIR = "/dev/shm"


class Communicator(ABC):
    """A process group of ``size`` ranks. Buffers are contiguous NumPy arrays."""

    rank: int
    size: int
    implementation: str

    @abstractmethod
    def allreduce(self, buf: np.ndarray) -> int:
        """Sum ``buf`` over all ranks in place; returns the bytes handed to the collective (buf.nbytes)."""

    @abstractmethod
    def alltoall(self, send: np.ndarray, recv: np.ndarray) -> int:
        """Block d of ``send`` (axis 0, ``size`` equal blocks) goes to rank d; block s of ``recv`` comes from
        rank s. Returns the bytes handed to the collective (send.nbytes, this rank's block to itself included)."""

    def alltoalls_together(self, pairs: list[tuple[np.ndarray, np.ndarray]]) -> None:
        """Post every (send, recv) alltoall of ``pairs`` before waiting for any, as an implementation that issues
        asynchronous collectives does (TorchRec posts a KeyedJaggedTensor's lengths and values together). The
        shared-memory group is driven by the calling thread, so here they run one after another."""
        for send, recv in pairs:
            self.alltoall(send, recv)

    @abstractmethod
    def barrier(self) -> None: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        pass


# --- shared memory -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShmSpec:
    """Everything a child needs to attach to the shared-memory group (picklable for spawn)."""

    name: str
    size: int
    slot_bytes: int
    barrier: Any  # multiprocessing.Barrier


FLAG_BYTES = 64  # one cache line per rank's barrier flag, so ranks never write the same line
SPIN_BEFORE_YIELD = 2000
# x86 keeps stores in order (TSO; glibc fences its non-temporal memcpy), so a rank's data copies are visible
# before its flag. Elsewhere NumPy gives no fence: fall back to the (slower) multiprocessing.Barrier.
SPIN_BARRIER = platform.machine().lower() in ("x86_64", "amd64")


def shm_bytes(ranks: int, slot_bytes: int) -> int:
    return ranks * FLAG_BYTES + (ranks + 1) * slot_bytes


def fitting_slot_bytes(ranks: int, slot_bytes: int, free_bytes: int) -> int:
    """The staging slot per rank for a segment in a shared-memory filesystem with ``free_bytes`` free: ``slot_bytes``,
    or, where that does not fit in half the free space (other processes' segments need room too), the largest whole
    MiB that does. Raises DlrmsimError below :data:`MIN_SLOT_BYTES`.

    Why: the segment is created sparse, so a segment larger than the filesystem is created without error, and the
    first write past its space kills the rank with SIGBUS. A container's ``/dev/shm`` is 64 MiB by default (Docker),
    and ranks + 1 slots of 64 MiB did not fit there."""
    room = (free_bytes // 2 - ranks * FLAG_BYTES) // (ranks + 1)
    slot = min(slot_bytes, room // 2**20 * 2**20)
    if slot < MIN_SLOT_BYTES:
        need = 2 * shm_bytes(ranks, MIN_SLOT_BYTES) / 2**20
        raise DlrmsimError(
            f"only {free_bytes / 2**20:.0f} MiB free; the host's shared-memory collectives of {ranks} ranks need {need:.0f} MiB",
            field=SHM_DIR,
            fix="give this machine or container more shared memory (e.g. docker run --shm-size=1g), or install torch "
            "(its gloo collectives use none)",
        )
    return slot


def shm_free_bytes() -> int:
    """Free bytes of the shared-memory filesystem; DlrmsimError where there is none (a container without /dev/shm)."""
    try:
        return shutil.disk_usage(SHM_DIR).free
    except OSError:
        raise DlrmsimError(
            f"this machine has no POSIX shared memory ({SHM_DIR})",
            field=SHM_DIR,
            fix="mount a tmpfs at /dev/shm, or install torch (its gloo collectives use none)",
        ) from None


class ShmCommunicator(Communicator):
    implementation = "shm"

    def __init__(self, spec: ShmSpec, rank: int) -> None:
        self.rank, self.size = rank, spec.size
        self._spec = spec
        self._shm = shared_memory.SharedMemory(name=spec.name)
        self._slot = spec.slot_bytes
        head = spec.size * FLAG_BYTES
        self._flags = np.ndarray(spec.size * FLAG_BYTES // 8, dtype=np.int64, buffer=self._shm.buf)[:: FLAG_BYTES // 8]
        raw = np.ndarray((spec.size + 1) * spec.slot_bytes, dtype=np.uint8, buffer=self._shm.buf, offset=head)
        self._slots = [raw[i * self._slot : (i + 1) * self._slot] for i in range(spec.size)]
        self._result = raw[spec.size * self._slot :]
        self._barrier = spec.barrier
        self._epoch = 0

    def barrier(self) -> None:
        if not SPIN_BARRIER:
            self._barrier.wait()
            return
        # Sense-free counter barrier: each rank only ever writes its own flag (no atomics needed).
        self._epoch += 1
        epoch = self._epoch
        self._flags[self.rank] = epoch
        spins = 0
        while self._flags.min() < epoch:
            spins += 1
            if spins > SPIN_BEFORE_YIELD:
                os.sched_yield()  # oversubscribed host: let the other rank run

    def allreduce(self, buf: np.ndarray) -> int:
        if buf.dtype != np.float32 or not buf.flags.c_contiguous:
            raise ValueError("shm allreduce takes a contiguous float32 array")
        flat = buf.reshape(-1)
        piece = self._slot // 4
        for start in range(0, flat.size, piece):
            n = min(piece, flat.size - start)
            mine = self._slots[self.rank].view(np.float32)[:n]
            np.copyto(mine, flat[start : start + n])
            self.barrier()
            lo, hi = self.rank * n // self.size, (self.rank + 1) * n // self.size
            out = self._result.view(np.float32)[lo:hi]
            np.add(self._slots[0].view(np.float32)[lo:hi], self._slots[1].view(np.float32)[lo:hi], out=out)
            for s in range(2, self.size):
                np.add(out, self._slots[s].view(np.float32)[lo:hi], out=out)
            self.barrier()
            np.copyto(flat[start : start + n], self._result.view(np.float32)[:n])
        return buf.nbytes

    def alltoall(self, send: np.ndarray, recv: np.ndarray) -> int:
        r = self.size
        sb = send.reshape(r, -1).view(np.uint8)
        rb = recv.reshape(r, -1).view(np.uint8)
        block = sb.shape[1]
        if rb.shape[1] != block:
            raise ValueError("alltoall send and receive blocks differ in size")
        piece = self._slot // r
        for start in range(0, block, piece):
            n = min(piece, block - start)
            mine = self._slots[self.rank]
            for d in range(r):
                np.copyto(mine[d * n : (d + 1) * n], sb[d, start : start + n])
            self.barrier()
            for s in range(r):
                np.copyto(rb[s, start : start + n], self._slots[s][self.rank * n : (self.rank + 1) * n])
            self.barrier()
        return send.nbytes

    def close(self) -> None:
        self._slots = []
        self._result = None  # type: ignore[assignment]
        self._flags = None  # type: ignore[assignment]
        self._shm.close()


# --- torch.distributed gloo ----------------------------------------------------------------------------------


class GlooCommunicator(Communicator):
    implementation = "gloo"

    def __init__(self, init_method: str, rank: int, size: int) -> None:
        import torch.distributed as dist

        self._dist = dist
        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=size)
        self.rank, self.size = rank, size

    def barrier(self) -> None:
        self._dist.barrier()

    def allreduce(self, buf: np.ndarray) -> int:
        import torch

        self._dist.all_reduce(torch.from_numpy(buf))
        return buf.nbytes

    def alltoall(self, send: np.ndarray, recv: np.ndarray) -> int:
        import torch

        self._dist.all_to_all_single(torch.from_numpy(recv.reshape(-1)), torch.from_numpy(send.reshape(-1)))
        return send.nbytes

    def alltoalls_together(self, pairs: list[tuple[np.ndarray, np.ndarray]]) -> None:
        import torch

        works = [
            self._dist.all_to_all_single(torch.from_numpy(r.reshape(-1)), torch.from_numpy(s.reshape(-1)), async_op=True)
            for s, r in pairs
        ]
        for w in works:
            w.wait()

    def close(self) -> None:
        self._dist.destroy_process_group()


# --- launcher ------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _child(fn: Callable[..., Any], rank: int, size: int, comm_spec: Any, threads: int, args: tuple, queue: Any) -> None:
    try:
        steady_allocator()  # every rank process measures with the allocator of a long training process
        threadpool_limits(limits=threads)
        if isinstance(comm_spec, ShmSpec):
            comm: Communicator = ShmCommunicator(comm_spec, rank)
        else:
            import torch

            torch.set_num_threads(threads)
            comm = GlooCommunicator(comm_spec, rank, size)
        try:
            result = fn(comm, *args)
        finally:
            comm.close()
        queue.put((rank, True, result))
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises
        queue.put((rank, False, traceback.format_exc()))


def run_ranks(
    fn: Callable[..., Any],
    ranks: int,
    implementation: str,
    args: tuple = (),
    threads_per_rank: int | None = None,
    timeout_s: float = 900.0,
    slot_bytes: int = SLOT_BYTES,
) -> list[Any]:
    """Run ``fn(comm, *args)`` in ``ranks`` fresh processes (spawn) joined by an "shm" or "gloo" group.

    ``fn`` must be a module-level function. Returns the results in rank order; a failure in any rank raises
    RuntimeError with that rank's traceback.
    """
    if ranks < 2:
        raise ValueError("run_ranks needs at least 2 ranks")
    ctx = mp.get_context("spawn")
    threads = threads_per_rank or max(1, usable_cores() // ranks)
    shm = None
    if implementation == "shm":
        slot_bytes = fitting_slot_bytes(ranks, slot_bytes, shm_free_bytes())
        shm = shared_memory.SharedMemory(create=True, size=shm_bytes(ranks, slot_bytes))
        np.ndarray(ranks * FLAG_BYTES, dtype=np.uint8, buffer=shm.buf)[:] = 0
        comm_spec: Any = ShmSpec(name=shm.name, size=ranks, slot_bytes=slot_bytes, barrier=ctx.Barrier(ranks))
    elif implementation == "gloo":
        comm_spec = f"tcp://127.0.0.1:{_free_port()}"
    else:
        raise DlrmsimError(f"unknown collective implementation '{implementation}'", fix="use shm or gloo")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(fn, r, ranks, comm_spec, threads, args, queue), daemon=True) for r in range(ranks)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(results) < ranks:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError(f"collective ranks did not finish in {timeout_s:.0f} s")
            try:
                rank, ok, value = queue.get(timeout=min(remaining, 1.0))
            except Exception:  # queue.Empty: check whether a rank died without reporting
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(f"rank process exited with code {dead[0].exitcode}") from None
                continue
            if not ok:
                raise RuntimeError(f"rank {rank} failed:\n{value}")
            results[rank] = value
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        if shm is not None:
            shm.close()
            shm.unlink()
    return [results[r] for r in range(ranks)]


def default_implementation() -> str:
    return "gloo" if torch_available() else "shm"


def implementation_for(backend: str) -> str:
    """gloo for the torch backend, shared memory for numpy."""
    return "gloo" if backend == "torch" else "shm"
