"""The behaviours Kalamkar et al. report for DLRM training on CPU clusters (SC20, arXiv:2005.04680), each
asserted as a SHAPE (a sign or an ordering) of simulated results, never as a published number.

docs/paper-behaviours.md lists every behaviour, the mechanism in dlrmsim that produces it, and its test here.
"""

from __future__ import annotations

from tests.paper.conftest import sim


def exposed_comm_s(r: object) -> float:
    b = r.breakdown  # type: ignore[attr-defined]
    return b.exposed_allreduce_s + b.exposed_alltoall_s


# --- behaviour 4: native alltoall beats the scatter-based exchanges ------------------------------------------


def test_b4_native_alltoall_is_faster_than_both_scatter_variants() -> None:
    # Because one progress thread runs one collective after another (PyTorch's MPI process group), the
    # scatters of ScatterList (one per table) and Fused Scatter (one per rank) each send from a single root's
    # NIC while every other NIC idles; the native alltoall drives all NICs at once.
    kw = dict(workload="mlperf", ranks=16, backend="mpi")
    a2a = sim(**kw, comm="alltoall").iteration_s
    for variant in ("scatter-list", "fused-scatter"):
        scatter = sim(**kw, comm=variant).iteration_s
        assert scatter > 1.5 * a2a, f"{variant}: {scatter:.4f} s vs alltoall {a2a:.4f} s"


# --- behaviour 5: MPI's in-order progress moves the allreduce into the alltoall wait --------------------------


def test_b5_large_mpi_overlapping_waits_on_alltoall_far_longer_than_blocking() -> None:
    # Because the backward alltoall is queued behind the gradient-allreduce buckets on MPI's single progress
    # thread, overlapping shows the allreduce's time as alltoall wait; blocking waits on each allreduce where
    # it is posted, so its alltoall wait is only the alltoall's own time.
    kw = dict(workload="large", ranks=32, backend="mpi")
    overlap = sim(**kw, blocking=False).breakdown
    blocking = sim(**kw, blocking=True).breakdown
    assert overlap.exposed_alltoall_s > 5 * blocking.exposed_alltoall_s
    assert blocking.exposed_allreduce_s > overlap.exposed_allreduce_s
