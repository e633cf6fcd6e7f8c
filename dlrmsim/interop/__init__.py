"""Reading other tools' model descriptions and plans into dlrmsim workloads and placements."""
