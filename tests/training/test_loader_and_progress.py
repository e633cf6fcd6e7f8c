"""The data loader phase and the progress-engine limit of the training model (issue 24)."""

from __future__ import annotations

import numpy as np

from dlrmsim.training.simulate import TrainingConfig, simulate_training, with_loader
from dlrmsim.training.taskgraph import LOADER_EXCHANGE, IterationSettings, build_iteration
from dlrmsim.workloads import load_workload, model
from dlrmsim.workloads.placement import PlacementSpec, place

MLPERF = load_workload("mlperf")


def _graph(loader: str, ranks: int = 4):  # noqa: ANN202
    w = with_loader(MLPERF, loader)
    pl = place(w, PlacementSpec(), ranks)
    return w, build_iteration(w, pl, IterationSettings(global_batch=8192)), pl


def test_a_sample_is_dense_features_indices_and_label_in_4_byte_values() -> None:
    # Because Criteo's binary samples hold 13 dense values, 26 indices and a label (Kalamkar et al.: 40 x 4 bytes).
    assert model.sample_bytes(MLPERF) == 160


def test_reference_loader_reads_the_global_batch_and_v1_the_local_batch() -> None:
    # Because the reference loader reads the whole global minibatch on every rank and v1 only its share;
    # one read+write pass each (loader.passes = 1).
    for loader, samples in (("reference", 8192), ("v1", 2048)):
        _, g, _ = _graph(loader)
        (task,) = [t for t in g.tasks(0) if t.name == "loader.read"]
        assert task.bytes == 2 * 160 * samples
    _, g, _ = _graph("none")
    assert not [t for t in g.tasks(0) if t.name == "loader.read"]


def test_v1_loader_sends_each_tables_indices_to_its_owner_before_the_lookups() -> None:
    # Because a rank can look up a table only once it holds every sample's index for it: each rank sends its
    # 2048 local samples' 4-byte indices of every table another rank owns, and waits before its first lookup.
    w, g, pl = _graph("v1")
    m = g.collectives[LOADER_EXCHANGE].matrix
    for r in range(4):
        foreign = sum(1 for sh in pl.shards if sh.rank != r)
        assert np.isclose(m[r].sum(), 2048 * foreign * 4)
    steps = [type(s).__name__ for s in g.programs[0]]
    first_lookup = next(i for i, s in enumerate(g.programs[0]) if getattr(s, "kind", "") == "embedding")
    assert "Wait" in steps[:first_lookup]
    assert LOADER_EXCHANGE not in _graph("reference")[1].collectives


def _comm_spans(res) -> list[tuple[float, float]]:  # noqa: ANN001
    spans: dict[str, list[float]] = {}
    for x in res.records:
        if x.category in ("allreduce", "alltoall") and x.rank == 0:
            s = spans.setdefault(x.name.split(".")[0], [np.inf, 0.0])
            s[0], s[1] = min(s[0], x.start), max(s[1], x.end)
    return sorted((a, b) for a, b in spans.values())


def test_one_progress_engine_runs_one_collective_after_another() -> None:
    # Because PyTorch's MPI process group runs its queue on one thread (progress_engines: 1), rank 0's
    # collectives never overlap in time; without the limit the allreduce buckets overlap each other.
    cfg = dict(workload="mlperf", ranks=8, backend="mpi")
    spans = _comm_spans(simulate_training(TrainingConfig(**cfg)))
    assert all(b0 <= a1 + 1e-12 for (_, b0), (a1, _) in zip(spans, spans[1:], strict=False))
    free = _comm_spans(simulate_training(TrainingConfig(**cfg, backend_overrides={"progress_engines": None})))
    assert any(b0 > a1 + 1e-9 for (_, b0), (a1, _) in zip(free, free[1:], strict=False))
