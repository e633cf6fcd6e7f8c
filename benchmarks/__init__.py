"""Performance benchmarks (run as modules: python -m benchmarks.bench_engine)."""
