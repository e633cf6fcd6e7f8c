"""Several model instances per many-core socket on the engine: ``simulate`` (settings in
``presets/*.yaml``, the instance runner, ``run_instances``) and ``cli`` (``dlrmsim instances``)."""
