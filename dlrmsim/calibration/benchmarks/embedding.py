"""Embedding-bag benchmarks (fit.fit_embedding): forward, backward and sparse SGD update of tables of several
shapes, poolings and index distributions, timed inside training-like cycles over a rank's tables."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dlrmsim.calibration.benchmarks.timing import POSITIONS, BenchTask, TimingPolicy, median_spread
from dlrmsim.calibration.dlrm_runner import LEARNING_RATE
from dlrmsim.calibration.ops import Op, Ops, embedding_bytes, make_indices
from dlrmsim.calibration.schema import Measurement
from dlrmsim.host import last_level_cache_bytes

ZIPF_EXPONENT = 1.05  # the mlperf preset's assumed Criteo skew (workloads/presets/mlperf.yaml)


@dataclass(frozen=True)
class EmbeddingConfig:
    rows: int
    dim: int
    pooling: int
    distribution: str
    batch: int
    tables: int = 0  # tables one cycle walks; 0: tables_per_cycle's choice


def embedding_configs(quick: bool, cache_bytes: int | None = None) -> list[EmbeddingConfig]:
    """Table shapes and lookup counts spanning what DLRM training on a host does (and the validation cases):
    two row counts (cache-resident index/working set vs not), two widths and three or four poolings, so that
    the fit can separate a per-row cost (rows = batch x pooling) from a per-byte cost (rows x dim) and a fixed
    one. With two poolings the quick fit had as many unknowns as points per shape, and its fixed term swung
    between 67 and 161 us from one calibration to the next; a middle pooling constrains it. Pooling 1 (2048
    lookups, where the fixed term is a large share) pins the intercept: without it two back-to-back quick
    calibrations fitted the update's fixed term at 50 and 0 us and predicted batch-256 25 % apart; with it, 1 and
    9 % in two trials (dlrmsim agreement, validation/results/*-agreement.json).

    Each configuration's tables per cycle are fixed here, from ``cache_bytes`` (this host's last-level cache when
    None) by :func:`tables_per_cycle`, so that every configuration is a distinct benchmark on any host."""
    cache = last_level_cache_bytes() if cache_bytes is None else cache_bytes
    shapes = [(2**18, 32), (2**18, 128), (2**21, 32)]
    poolings = (1, 4, 16, 32) if quick else (1, 4, 16, 64)
    configs = [EmbeddingConfig(r, dim, p, d, 2048) for r, dim in shapes for p in poolings for d in ("uniform", "zipf")]
    configs = [replace(c, tables=tables_per_cycle(c, cache)) for c in configs]
    # The first shape again at another table count: a rank's other tables pass through the cache between a
    # table's forward and its update, and the reload term (costs.cache_miss_share of the cycle's working set) can
    # only be told from a per-lookup cost when the fit sees that traffic change. Measured on a 2-core host with a
    # 32 MiB cache (uniform, 262144 x 32): at 8192 lookups the update went from 53 to 65 and 74 ns per lookup with
    # 2, 4 and 8 tables, at 65536 lookups 67.4, 67.9 and 69.6. Where the cache rule already gives that shape 4
    # tables (a 300 MiB cache), the other count is 2: with 4 again the plan timed the same benchmark twice under
    # one id (and the partial-results cache could not tell them apart).
    configs += [replace(c, tables=other_table_count(c.tables)) for c in configs if (c.rows, c.dim) == shapes[0]]
    return configs


def other_table_count(tables: int) -> int:
    """The table count a configuration is timed at besides ``tables``: 4, or 2 where ``tables`` is already 4."""
    return 2 if tables >= 4 else 4


def lookup_params(cfg: Any, op: str, position: str, unique_rows: int, tables: int) -> dict[str, float | int | str]:
    """The parameters of an embedding-lookup measurement that the embedding fit reads (fit.embedding_features):
    ``cfg`` is any configuration with rows, dim, pooling, distribution and batch (an embedding bag's or a TBE's)."""
    return {
        "op": op,
        "position": position,
        "rows": cfg.rows,
        "dim": cfg.dim,
        "pooling": cfg.pooling,
        "distribution": cfg.distribution,
        "batch": cfg.batch,
        "unique_rows": unique_rows,
        "lookups": cfg.batch * cfg.pooling,
        "tables": tables,
    }


def tables_per_cycle(cfg: EmbeddingConfig, cache_bytes: int) -> int:
    """Tables one benchmark cycle walks: enough that together they exceed twice the last-level cache (a rank
    of a DLRM holds many tables), from 2 to 4."""
    return int(min(4, max(2, math.ceil(2 * cache_bytes / (cfg.rows * cfg.dim * 4)))))


# Tables by (backend, rows, dim), kept across embedding tasks: filling a 256 MiB table costs more than
# timing its ops, and a table's values do not change what a lookup costs.
_TABLE_CACHE: dict[tuple[str, int, int], list[Any]] = {}


def _tables(ops: Ops, rows: int, dim: int, count: int) -> list[Any]:
    tabs = _TABLE_CACHE.setdefault((ops.name, rows, dim), [])
    rng = np.random.default_rng(rows + dim)
    while len(tabs) < count:
        tabs.append(ops.new_table(rows, dim, rng))
    return tabs[:count]


def clear_table_cache() -> None:
    """Free the embedding benchmark's tables (the calibration calls it when the plan is done)."""
    _TABLE_CACHE.clear()


# A run's first call and its later ones (timing.POSITIONS). For the embedding ops, with PyTorch the first call of a run
# costs far more
# than the calls after it (2 cores, 4 tables of 200k x 32, 16 lookups per sample: forward ~470 us, then
# ~215 for each later table; backward ~380, then ~180), with or without the flush, and in the DLRM runner's
# steps alike. One tiny bag forward on another table just before takes the forward's away, so it is the op's
# own code and state gone cold while other work ran, not the tables' data. A rank pays it once per run of
# the op, whatever its table count, so it is measured apart from the later calls.


def time_embedding_cycle(
    ops: Ops, cfg: EmbeddingConfig, batches: list[np.ndarray], policy: TimingPolicy, flush: Op, tables: int
) -> dict[tuple[str, str], list[float]]:
    """Per cycle, seconds of each op's first call and the mean of its later calls, keyed (op, position), for
    the forward, backward and sparse SGD update, timed inside training-like cycles.

    The ops are those of the DLRM runner (``ops``, the calibration's op layer), in the order a training step
    runs them on a rank holding ``tables`` (at least 2) tables: every table's forward, then every backward,
    then every update, each table with a new minibatch's indices each cycle (the next of ``batches``, which
    should hold one per table and cycle: see :func:`embedding_batches`); ``flush`` starts a cycle, as the MLPs
    and the exchanges do. So the update applies a fresh uncoalesced gradient, the tables evict one another as
    a rank's tables do, and a gradient is as warm as the backward left it.
    """
    if tables < 2:
        raise ValueError("an embedding cycle needs at least 2 tables: a first call and a later one")
    tabs = _tables(ops, cfg.rows, cfg.dim, tables)
    idx2 = [np.ascontiguousarray(b, dtype=np.int64).reshape(cfg.batch, cfg.pooling) for b in batches]
    dpooled = ops.tensor(np.full((cfg.batch, cfg.dim), 1e-3, dtype=np.float32))
    clock = time.perf_counter
    out: dict[tuple[str, str], list[float]] = {(op, pos): [] for op in ("forward", "backward", "update") for pos in POSITIONS}
    for i in range(policy.warmup + policy.repeats):
        idx = [idx2[(i * tables + j) % len(idx2)] for j in range(tables)]
        flush()
        times: dict[str, list[float]] = {"forward": [], "backward": [], "update": []}
        for tab, ix in zip(tabs, idx, strict=True):
            t0 = clock()
            ops.emb_forward(tab, ix)
            times["forward"].append(clock() - t0)
        grads = []
        for tab, ix in zip(tabs, idx, strict=True):
            t0 = clock()
            grads.append(ops.emb_backward(tab, ix, dpooled))
            times["backward"].append(clock() - t0)
        for tab, ix, g in zip(tabs, idx, grads, strict=True):
            t0 = clock()
            ops.emb_update(tab, ix, g, LEARNING_RATE)
            times["update"].append(clock() - t0)
        if i >= policy.warmup:
            for op_name, ts in times.items():
                out[(op_name, "first")].append(ts[0])
                out[(op_name, "rest")].append(statistics.mean(ts[1:]))
    return out


def embedding_batches(policy: TimingPolicy, tables: int) -> int:
    """Distinct index batches an embedding benchmark draws: one per table and cycle, as a training step's
    minibatch is new. Cycling 8 (as this benchmark once did) brought each table's rows back every 4 cycles,
    and for the smaller poolings (1 MiB of rows a batch) they were still in the last-level cache."""
    return (policy.warmup + policy.repeats) * tables


def embedding_task(k: Ops, cfg: EmbeddingConfig, cores: int, policy: TimingPolicy) -> BenchTask:
    """Forward, backward and update of one table configuration: per op, a row for the later calls of a run
    (``embedding {op} ...``, position "rest") and one for its first call (``embedding {op} first ...``)."""
    tables = cfg.tables or tables_per_cycle(cfg, last_level_cache_bytes())
    base = f"r{cfg.rows} d{cfg.dim} p{cfg.pooling} {cfg.distribution} b{cfg.batch} t{tables} c{cores}"

    def run() -> list[Measurement]:
        rng = np.random.default_rng(cfg.rows + cfg.dim + cfg.pooling + tables)
        count = embedding_batches(policy, tables)
        # One draw for all batches: a Zipf draw builds the table's whole CDF, once.
        batches = list(
            make_indices(cfg.rows, cfg.batch * cfg.pooling * count, cfg.distribution, ZIPF_EXPONENT, rng).reshape(count, -1)
        )
        unique_rows = round(statistics.mean(np.unique(b).size for b in batches))
        nbytes = embedding_bytes(cfg.batch, cfg.pooling, cfg.dim, unique_rows)
        with k.threads(cores):
            samples = time_embedding_cycle(k, cfg, batches, policy, k.flush, tables)
        out = []
        for (op_name, position), ts in samples.items():
            med, spread = median_spread(ts)
            label = f"{op_name} first" if position == "first" else op_name
            out.append(
                Measurement(
                    benchmark="embedding",
                    name=f"embedding {label} {base}",
                    cores=cores,
                    params=lookup_params(cfg, op_name, position, unique_rows, tables),
                    bytes=nbytes[op_name],
                    time_s=med,
                    spread_pct=spread,
                    repeats=len(ts),
                )
            )
        return out

    return BenchTask("embedding bags", f"embedding {base}", run, repeat=True)
