"""The TorchRec validation target builds the model dlrmsim simulates, and times it the repeatable way."""

from __future__ import annotations

import builtins
import statistics

import pytest

from dlrmsim.errors import DlrmsimError
from dlrmsim.workloads.model import interaction_width, mlp_layers
from dlrmsim.workloads.schema import Workload

TINY = Workload.model_validate(
    {
        "name": "tiny-torchrec",
        "tables": {"count": 3, "rows": 1000},
        "embedding_dim": 16,
        "lookups_per_sample": 4,
        "bottom_mlp": [13, 32, 16],
        "top_mlp": [32, 1],
        "minibatch": {"strong_global": 64, "weak_local": 64},
    }
)


def test_missing_torchrec_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from dlrmsim.calibration.targets import torchrec as target

    real_import = builtins.__import__

    def no_torchrec(name: str, *args: object, **kwargs: object) -> object:
        if name == "torchrec" or name.startswith("torchrec."):
            raise ImportError(name=name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torchrec)
    # Because torchrec is an optional extra, its absence must read as an install hint, not a traceback.
    with pytest.raises(DlrmsimError, match="pip install"):
        target.require_torchrec()


def test_cat_interaction_has_no_torchrec_model() -> None:
    pytest.importorskip("torchrec")
    from dlrmsim.calibration.targets.torchrec import build_model

    cat = TINY.model_copy(update={"interaction": "cat"})
    # Because TorchRec's DLRM only implements the dot interaction, a cat workload is refused in one line.
    with pytest.raises(DlrmsimError, match="interaction"):
        build_model(cat, "fused")


@pytest.mark.parametrize("path", ["fused", "ebc"])
def test_model_has_the_layers_dlrmsim_simulates(path: str) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchrec")
    from dlrmsim.calibration.targets.torchrec import build_model

    model, opt = build_model(TINY, path)  # type: ignore[arg-type]
    first_over = next(m for m in model.over_arch.modules() if isinstance(m, torch.nn.Linear))
    mlp_params = sum(layer.params for layer in mlp_layers(TINY))
    table_params = sum(TINY.table_rows) * TINY.embedding_dim
    stepped = sum(p.numel() for group in opt.param_groups for p in group["params"])
    # Because the over-arch input is the dot interaction, its width is dlrmsim's (S+1)S/2 + E.
    assert first_over.in_features == interaction_width(TINY)
    # Because the fused path updates tables inside backward, its optimizer steps the MLPs only; the plain
    # EmbeddingBagCollection path steps the full tables too (dense gradients).
    assert stepped == (mlp_params if path == "fused" else mlp_params + table_params)


def test_fused_step_updates_only_touched_rows() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchrec")
    from dlrmsim.calibration.targets.torchrec import build_model, make_batches

    model, opt = build_model(TINY, "fused")
    dense, kjt, labels = make_batches(TINY, 8, 1)[0]
    before = [t.detach().clone() for t in model.sparse_arch.embedding_bag_collection.state_dict().values()]
    with torch.enable_grad():  # other tests' torch ops may have switched autograd off process-wide
        loss = torch.nn.BCEWithLogitsLoss()(model(dense_features=dense, sparse_features=kjt), labels)
        loss.backward()
        opt.step()
    after = list(model.sparse_arch.embedding_bag_collection.state_dict().values())
    touched = set(kjt["f0"].values().tolist())
    changed = set(torch.nonzero((after[0] - before[0]).abs().sum(dim=1)).flatten().tolist())
    # Because fbgemm fuses sparse SGD into backward, exactly the looked-up rows of table 0 move.
    assert changed and changed <= touched


def test_measurement_reports_median_and_spread() -> None:
    pytest.importorskip("torchrec")
    from dlrmsim.calibration.targets.torchrec import measure_step

    m = measure_step(TINY, 32, 1, "fused", samples=3, min_sample_s=0.005, warmup_steps=1)
    # Because every sample loops whole steps, the median is one of the samples and the spread is non-negative.
    assert m.median_s in m.samples_s and m.spread >= 0 and m.steps_per_sample >= 1


def test_planner_estimate_grows_with_lookups() -> None:
    pytest.importorskip("torchrec")
    from dlrmsim.calibration.targets.torchrec import planner_estimate

    one = planner_estimate(TINY, 64)
    four = planner_estimate(TINY.model_copy(update={"lookups_per_sample": 16}), 64)
    # Because TorchRec's estimator charges embedding compute by bytes read (pooling factor x dim), four times
    # the lookups cost more, and every table is placed somewhere.
    assert four.compute_s > one.compute_s > 0 and len(one.sharding) == TINY.num_tables


def test_torchrec_interaction_benchmark_times_interaction_arch_with_autograd() -> None:
    """The calibration's TorchRec interaction rows come from InteractionArch itself: a forward and an autograd
    backward per shape, as separate rows of their own benchmark, with the model's flops, bytes and ops."""
    pytest.importorskip("torchrec")
    from dlrmsim.calibration.benchmarks.interaction import InteractionConfig, interaction_task
    from dlrmsim.calibration.benchmarks.timing import TimingPolicy
    from dlrmsim.calibration.ops import get_ops

    policy = TimingPolicy(warmup=1, repeats=3, min_sample_s=0.0)
    task = interaction_task(get_ops("torch"), InteractionConfig(64, 3, 16), 1, policy, "torchrec")
    rows = task.run()
    assert [(m.benchmark, m.params["direction"]) for m in rows] == [
        ("interaction_torchrec", "forward"),
        ("interaction_torchrec", "backward"),
    ]
    assert all(m.time_s > 0 and m.repeats == 3 for m in rows)
    # because autograd's backward forms two products where the forward forms one, it counts twice the flops
    assert rows[1].flops == pytest.approx(2 * rows[0].flops)


def test_tbe_benchmark_times_torchrecs_sparse_arch_where_torchrec_is_installed() -> None:
    """The TBE rows of a calibration with TorchRec installed time the module TorchRec's DLRM calls (SparseArch over a
    fused collection, a KeyedJaggedTensor in), and say so in their name and parameters."""
    pytest.importorskip("torchrec")
    from dlrmsim.calibration.benchmarks.tbe import TbeConfig, build_sparse_arch, calibrated_module, tbe_inputs, tbe_task
    from dlrmsim.calibration.benchmarks.timing import TimingPolicy

    assert calibrated_module() == "sparse_arch"
    cfg = TbeConfig(1000, 16, 4, 64, 3, "uniform", 0, "sparse_arch")
    # because TorchRec's DLRM feeds the interaction a (batch, tables, dim) tensor, the benchmark's backward must
    # take a gradient of that shape
    (kjt,) = tbe_inputs(cfg, 1)[0]
    assert tuple(build_sparse_arch(cfg)(kjt).shape) == (64, 3, 16)
    rows = tbe_task(cfg, TimingPolicy(warmup=1, repeats=3, min_sample_s=0.0)).run()
    assert [(m.benchmark, m.params["op"], m.params["module"]) for m in rows] == [
        ("tbe", "forward", "sparse_arch"),
        ("tbe", "update", "sparse_arch"),
    ]
    assert all(m.name.endswith("sparse_arch c1") and m.time_s > 0 for m in rows)


def test_each_timed_tbe_forward_follows_the_flush_and_the_rewarm(monkeypatch: pytest.MonkeyPatch) -> None:
    # Because a step's lookups meet rows that the rest of the step has pushed out of the cache, and framework state
    # that its other ops keep warm, every forward the TBE benchmark times comes right after one flush and one rewarm,
    # in that order; back to back, a batch of ids that came round again could find its rows still cached.
    pytest.importorskip("torchrec")
    from dlrmsim.calibration.benchmarks import tbe
    from dlrmsim.calibration.benchmarks.timing import TimingPolicy
    from dlrmsim.calibration.ops import get_ops

    k = get_ops("torch")
    events: list[str] = []
    monkeypatch.setattr(k, "flush", lambda: events.append("flush"))
    real_rewarm = type(k).make_rewarm(k)
    monkeypatch.setattr(k, "make_rewarm", lambda: lambda: (real_rewarm(), events.append("rewarm")))
    build = tbe.build_sparse_arch

    def counted(cfg: object, seed: int = 0) -> object:
        module = build(cfg, seed)
        module.register_forward_pre_hook(lambda *_: events.append("forward"))
        return module

    monkeypatch.setattr(tbe, "build_sparse_arch", counted)
    cfg = tbe.TbeConfig(1000, 16, 4, 64, 3, "uniform", 0, "sparse_arch")
    rows = tbe.tbe_task(cfg, TimingPolicy(warmup=1, repeats=3, min_sample_s=0.0), ops=k).run()
    assert len(rows) == 2
    forwards = [i for i, e in enumerate(events) if e == "forward"]
    assert len(forwards) == 1 + 7  # warm-up, then at least 7 samples
    assert all(events[i - 2 : i] == ["flush", "rewarm"] for i in forwards)


def test_a_timed_loop_cycles_enough_batches_that_their_rows_are_fresh() -> None:
    from dlrmsim.calibration.targets.torchrec import MAX_FRESH_BATCHES, fresh_batch_count
    from dlrmsim.calibration.validate import load_cases

    # the validation's base case: 4 tables of 200k rows, E=32, 16 lookups a sample
    base = next(c.workload for c in load_cases() if c.name == "base")
    per_batch = 4 * 256 * 16 * 32 * 4  # rows a batch of 256 reads, at most: 2 MiB
    cache = 32 << 20
    n = fresh_batch_count(base, 256, cache)
    # Because a batch comes back only after the others have read twice the cache of other rows, n - 1 batches of
    # rows cover 64 MiB, and one batch fewer would not
    assert (n - 1) * per_batch >= 2 * cache > (n - 2) * per_batch
    # because a cycle's own rows can never stay cached once a batch's rows alone overflow it, big batches need only
    # the floor of 4
    assert fresh_batch_count(base, 65_536, cache) == 4
    # because tables smaller than the cache stay cached in training too, their rows need no more than the tables'
    # bytes between visits (TINY: 3 x 1000 x 16 x 4 B = 192 KB against 64 x 4 lookups x 3 x 64 B = 48 KB a batch)
    assert fresh_batch_count(TINY, 64, cache) == 5
    # and a tiny batch on a huge cache stops at the cap
    assert fresh_batch_count(base, 1, 1 << 40) == MAX_FRESH_BATCHES


def test_torchrec_keeps_its_advice_off_the_terminal(caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("torchrec")
    import logging

    from dlrmsim.calibration.targets.torchrec import planner_estimate

    with caplog.at_level(logging.WARNING):
        planner_estimate(TINY, 64)
    # because TorchRec's planner logs two warnings a plan about how it was called (some 200 lines around one
    # validation table), the target silences them: a user sees the table, and errors still show
    assert not [r for r in caplog.records if r.name.startswith("torchrec")]


def test_phases_split_the_step_into_dlrmsims_phases() -> None:
    pytest.importorskip("torchrec")
    from dlrmsim.calibration.targets.torchrec import ARCH_PHASES, measure_phases, measure_step

    # three phase passes, each beside a plain step timing: a slow spell of the host lands on one pair (one pair on a
    # fresh clone's CI once gave 2.01x, the phases' 2.8 ms against a step's 1.4 ms)
    ratios, phases = [], {}
    for _ in range(3):
        phases = measure_phases(TINY, 64, 1, min_s=0.05)
        step = measure_step(TINY, 64, 1, samples=3, min_sample_s=0.02)
        ratios.append(sum(phases.values()) / step.median_s)
    # Because every part of the step is timed by hooks on the DLRM's four parts, the optimizer step and the rest,
    # each of dlrmsim's phases is there and took time, and together they make up about one step (the phase pass
    # is a run of its own, on a shared host: the median pair within a factor of two).
    want = {p for pair in ARCH_PHASES.values() for p in pair} | {"mlp_update", "other"}
    assert set(phases) == want
    assert all(v > 0 for k, v in phases.items() if k != "other"), phases
    assert 0.5 < statistics.median(ratios) < 2.0, ratios
