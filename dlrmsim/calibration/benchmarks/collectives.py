"""Collective benchmarks (fit.fit_collectives): allreduce and alltoall sweeps over message sizes between host
processes, each call timed after a gap of compute, as in a training loop."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np

from dlrmsim.calibration.benchmarks.timing import BenchTask, TimingPolicy, median_spread, time_op
from dlrmsim.calibration.collectives_host import run_ranks
from dlrmsim.calibration.schema import Measurement


def collective_sizes(quick: bool) -> list[int]:
    """Bytes per rank: 4 KiB..64 MiB quick (spans the Small/MLPerf Eq. 1 sizes and Small's Eq. 2 at 2 ranks,
    8 MiB per rank); 1 KiB..1 GiB full (spans every preset's Eq. 1 and Eq. 2 size at 2 ranks, Large's 1 GiB
    allreduce and 512 MiB alltoall per rank included)."""
    if quick:
        return [4 * 4**i * 1024 for i in range(8)]
    return [4**i * 1024 for i in range(11)]


# Compute each rank runs before every timed collective call, as a training step computes between its
# collectives (the runner's 2-rank validation cases compute 1-3 ms between them). On a host whose cores all
# run compute threads, a collective's helper threads (gloo's progress and I/O threads) wait for a core
# whenever the other rank has left the previous collective and is computing again: back-to-back calls, or
# calls each behind a barrier, never show that wait, and a training loop pays it on a third of its calls.
COLLECTIVE_GAP_S = 2e-3
GAP_MATRIX = 128  # the gap's GEMM: small enough that the count rounds finely, big enough to be compute
GAP_SIZING_POLICY = TimingPolicy(warmup=1, repeats=5, min_sample_s=0.0)  # one GEMM per sample, as the gap runs it


def _inner_calls(nbytes: int) -> int:
    # Calls per timed sample: enough that one sample averages over the occasional late completion (8 up to
    # 4 MiB), and at least 2 because a sample's first call follows the repeat's barrier rather than the other
    # rank's compute. Calls of 16 MiB and up take long enough that a late wake-up hardly shows.
    return max(2, min(8, (32 * 2**20) // max(nbytes, 1)))


def gap_count(gap_s: float) -> int:
    """How many of the gap's GEMMs last about ``gap_s`` on this process's threads (timed here)."""
    a = np.full((GAP_MATRIX, GAP_MATRIX), 0.5, dtype=np.float32)
    one, _, _ = time_op(lambda: a @ a, GAP_SIZING_POLICY)
    return max(1, round(gap_s / max(one, 1e-7)))


def gemm_work(count: int) -> Callable[[], None]:
    """``count`` of the gap's GEMMs, one after another."""
    a = np.full((GAP_MATRIX, GAP_MATRIX), 0.5, dtype=np.float32)

    def work() -> None:
        for _ in range(count):
            a @ a

    return work


def _gap_work(gap_s: float) -> Callable[[], None]:
    """A fixed amount of GEMM work lasting about ``gap_s`` on this rank's threads (sized once, up front)."""
    return gemm_work(gap_count(gap_s))


CallTimes = list[list[tuple[float, float]]]  # per repeat, per call: (entry, exit) on perf_counter's clock


def time_collective(
    comm,
    op: str,
    send: np.ndarray,
    recv: np.ndarray | None,
    policy: TimingPolicy,  # noqa: ANN001
    gap_s: float = COLLECTIVE_GAP_S,
) -> CallTimes:
    """Entry and exit times of each timed call on this rank, in a training loop's rhythm: ranks start a
    repeat together (barrier), then each call follows ``gap_s`` of compute, so ranks arrive apart by their
    compute's own jitter and one rank computes while the other finishes the previous call.
    ``time.perf_counter`` reads the host's monotonic clock, the same in every process, so ranks' times
    compare (combine_ranks)."""
    inner = _inner_calls(send.nbytes)
    gap = _gap_work(gap_s)

    def call() -> None:
        if op == "allreduce":
            comm.allreduce(send)
        else:
            comm.alltoall(send, recv)

    for _ in range(policy.warmup):
        gap()
        call()
    samples: CallTimes = []
    for _ in range(policy.repeats):
        comm.barrier()
        calls = []
        for _ in range(inner):
            gap()
            t0 = time.perf_counter()
            call()
            calls.append((t0, time.perf_counter()))
        samples.append(calls)
    return samples


def collective_sweep_rank(comm, op: str, sizes: list[int], policy: TimingPolicy) -> list[CallTimes]:  # noqa: ANN001
    """Rank body of a collective sweep: per size, the timed calls on this rank."""
    out = []
    for nbytes in sizes:
        elems = max(comm.size, nbytes // 4 // comm.size * comm.size)
        # Zeros so repeated in-place sums never overflow, written (np.full) so the pages are real: np.zeros
        # maps untouched pages to the kernel's one zero page, which reads from cache and inflates bandwidth.
        send = np.full(elems, 0.0, dtype=np.float32)
        recv = np.full_like(send, 0.0) if op == "alltoall" else None
        out.append(time_collective(comm, op, send, recv, policy))
    return out


def combine_ranks(per_rank: list[CallTimes]) -> tuple[float, float]:
    """One collective call costs a step from the last rank's arrival to the last rank's departure: the
    arrival skew is the compute's imbalance, not the collective's. Per repeat the mean over its calls (a
    step pays every call, the occasional late wake-up included), then the median over repeats."""
    samples = []
    for calls in zip(*per_rank, strict=True):
        per_call = [max(c[1] for c in ranks) - max(c[0] for c in ranks) for ranks in zip(*calls, strict=True)]
        samples.append(statistics.fmean(per_call))
    return median_spread(samples)


def collective_task(op: str, sizes: list[int], ranks: int, implementation: str, threads: int, policy: TimingPolicy) -> BenchTask:
    name = f"{op} sweep {implementation} R{ranks}"

    def run() -> list[Measurement]:
        results = run_ranks(collective_sweep_rank, ranks, implementation, args=(op, sizes, policy), threads_per_rank=threads)
        out = []
        for i, nbytes in enumerate(sizes):
            elems = max(ranks, nbytes // 4 // ranks * ranks)
            med, spread = combine_ranks([r[i] for r in results])
            out.append(
                Measurement(
                    benchmark=op,
                    name=f"{op} {elems * 4}B R{ranks}",
                    cores=threads * ranks,
                    params={
                        "ranks": ranks,
                        "implementation": implementation,
                        "bytes_per_rank": elems * 4,
                        "calls": _inner_calls(elems * 4),
                        "gap_s": COLLECTIVE_GAP_S,
                    },
                    bytes=elems * 4.0,
                    time_s=med,
                    spread_pct=spread,
                    repeats=policy.repeats,
                )
            )
        return out

    return BenchTask("collectives", name, run)


# --- collectives posted together -----------------------------------------------------------------------------

# Two alltoalls posted before either is waited for, as TorchRec's input distribution posts a KeyedJaggedTensor's
# lengths and values (8 KB and 256 KB a rank in the validation's two-rank base case). Two of one size, between
# those: fully at once they take one's time, one after another twice that, so series / together reads the number
# of collectives that progress at once, from 1 to 2 (with unequal sizes full concurrency would read less than 2).
TOGETHER_BYTES = (64 * 1024, 64 * 1024)
TOGETHER_CALLS = 4  # calls of each mode per repeat, the two modes interleaved


def together_rank(comm, policy: TimingPolicy) -> dict[str, CallTimes]:  # noqa: ANN001
    """Rank body of the concurrency benchmark: per repeat, the TOGETHER_BYTES alltoalls run one after another
    ("series") and posted together ("together"), interleaved, each call after the training loop's compute gap."""
    sends = [np.full(max(comm.size, b // 4 // comm.size * comm.size), 0.0, dtype=np.float32) for b in TOGETHER_BYTES]
    pairs = [(s, np.full_like(s, 0.0)) for s in sends]
    gap = _gap_work(COLLECTIVE_GAP_S)

    def series() -> None:
        for send, recv in pairs:
            comm.alltoall(send, recv)

    calls_of = {"series": series, "together": lambda: comm.alltoalls_together(pairs)}
    for _ in range(policy.warmup):
        for call in calls_of.values():
            gap()
            call()
    out: dict[str, CallTimes] = {mode: [] for mode in calls_of}
    for _ in range(policy.repeats):
        comm.barrier()
        calls: dict[str, list[tuple[float, float]]] = {mode: [] for mode in calls_of}
        for _ in range(TOGETHER_CALLS):
            for mode, call in calls_of.items():
                gap()
                t0 = time.perf_counter()
                call()
                calls[mode].append((t0, time.perf_counter()))
        for mode in calls_of:
            out[mode].append(calls[mode])
    return out


def together_task(ranks: int, implementation: str, threads: int, policy: TimingPolicy) -> BenchTask:
    """How many collectives a rank's process group progresses at once: two alltoalls run one after another
    against the same two posted together (fit.fit_collectives_at_once). On the 2-vCPU VM with gloo, two
    processes of one thread, 8 KB and 256 KB: 0.62-0.92 ms together against 0.74-0.96 ms in series with a short
    gap before each call; 1.11 against 1.59 ms with the calibration's 2 ms gap (series / together 1.43)."""
    label = "+".join(f"{b}B" for b in TOGETHER_BYTES)
    name = f"alltoall together {implementation} R{ranks}"

    def run() -> list[Measurement]:
        results = run_ranks(together_rank, ranks, implementation, args=(policy,), threads_per_rank=threads)
        out = []
        for mode in ("series", "together"):
            med, spread = combine_ranks([r[mode] for r in results])
            out.append(
                Measurement(
                    benchmark="alltoall_together",
                    name=f"alltoall {mode} {label} R{ranks}",
                    cores=threads * ranks,
                    params={"ranks": ranks, "implementation": implementation, "mode": mode, "gap_s": COLLECTIVE_GAP_S},
                    bytes=float(sum(TOGETHER_BYTES)),
                    time_s=med,
                    spread_pct=spread,
                    repeats=policy.repeats,
                )
            )
        return out

    return BenchTask("collectives", name, run)
