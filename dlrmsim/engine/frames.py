"""Records as a pandas DataFrame: the raw result tables readers analyse (kept apart from the engine's record log, so
that simulating never imports pandas)."""

from __future__ import annotations

import operator

import pandas as pd

from dlrmsim.engine.records import RECORD_COLUMNS, Record


def records_frame(records: list[Record]) -> pd.DataFrame:
    """The raw result: one row per record, columns as in :class:`Record` plus ``duration`` (s)."""
    if not records:
        return pd.DataFrame(columns=RECORD_COLUMNS + ["duration"])
    row = operator.attrgetter(*RECORD_COLUMNS)
    df = pd.DataFrame.from_records([row(r) for r in records], columns=RECORD_COLUMNS)
    df["duration"] = df["end"] - df["start"]
    return df
