"""DLRM training on the engine: the iteration's task graph, dense optimizers, the simulation and its CLI.

``simulate`` (inputs, :class:`TrainingConfig`, :class:`TrainingResult`, ``simulate_training``), ``taskgraph``
(one rank's iteration program), ``optimizers`` (``presets/optimizers/*.yaml``), ``cli`` (``dlrmsim simulate``).
"""
