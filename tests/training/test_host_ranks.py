"""`simulate -t host -r N`: N processes on this machine, as torchrun --nproc_per_node=N starts them."""

from __future__ import annotations

import json

import pytest

from dlrmsim.errors import DlrmsimError
from dlrmsim.host import usable_cores
from dlrmsim.topologies import load_topology
from dlrmsim.training.simulate import TrainingConfig, load_training_topology

CORES = load_topology("host").compute(0).cores


@pytest.mark.skipif(usable_cores() < 2, reason="needs 2 cores to split")
def test_host_splits_its_cores_over_rank_processes() -> None:
    topo = load_training_topology(TrainingConfig(topology="host", workload="small", ranks=2))
    one = load_topology("host").compute(0)
    # Because two processes share the machine, each gets half its cores and so half its peak flop rate.
    assert topo.num_ranks == 2 and topo.compute(1).cores == CORES // 2
    assert topo.compute(0).peak_flops["fp32"] == pytest.approx(one.peak_flops["fp32"] * (CORES // 2) / CORES)


def test_threads_per_rank_sets_each_process_cores() -> None:
    topo = load_training_topology(TrainingConfig(topology="host", workload="small", ranks=3, threads_per_rank=2))
    # Because each of the 3 processes runs 2 threads, the machine is modelled with 6 cores, 2 per rank.
    assert topo.num_ranks == 3 and [topo.compute(r).cores for r in range(3)] == [2, 2, 2]


def test_threads_per_rank_is_for_the_host_only() -> None:
    # Because a cluster socket's cores are its datasheet's, only the host's processes can be sized this way.
    with pytest.raises(DlrmsimError, match="host topology only"):
        load_training_topology(TrainingConfig(topology="clx-64s-opa", workload="small", ranks=2, threads_per_rank=1))


@pytest.mark.skipif(usable_cores() < 2, reason="needs 2 cores to split")
def test_cli_simulates_two_host_processes(capsys: pytest.CaptureFixture[str]) -> None:
    from dlrmsim.cli import main

    main(["simulate", "-t", "host", "-w", "small", "-r", "2", "--blocking", "--json"])
    out = json.loads(capsys.readouterr().out)
    # Because the host fabric is generated per rank count, 2 ranks on the host are a valid run, not a refusal; and
    # because the host's ranks talk through its calibrated collectives, no backend named means shm (ccl would pin
    # 4 cores a rank, more than a small host has).
    assert out["config"]["ranks"] == 2 and out["iteration_s"] > 0
    assert out["config"]["backend"] == "shm"


def test_a_topology_names_its_default_backend_and_an_explicit_one_wins() -> None:
    # Because host.yaml says default_backend: shm and the cluster presets say nothing (ccl, Kalamkar et al.'s).
    assert TrainingConfig(topology="host").backend == "shm"
    assert TrainingConfig(topology="clx-64s-opa").backend == "ccl"
    assert TrainingConfig(topology="host", backend="mpi").backend == "mpi"
