"""The calibration's micro-benchmarks, one module per family, named like the fit that reads them
(:mod:`dlrmsim.calibration.fit`): ``gemm`` (fit_gemm), ``memory`` (fit_memory), ``embedding`` (fit_embedding),
``interaction`` (fit_interaction), ``overhead`` (fit_overhead), ``collectives`` (fit_collectives), and
``eq_check`` (the Eq. 1 / Eq. 2 check). ``timing`` holds what they share; ``plan`` orders them into a calibration.
"""
