"""Request-level inference serving on the engine: ``model`` (cost formulas as pure functions), ``simulate``
(the SimPy serving run, ``simulate_serving`` and ``find_max_qps``) and ``cli`` (``dlrmsim serve``)."""
