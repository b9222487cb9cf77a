"""Parts committed as one parquet file: their schemas unified as pandas reads them."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pairkit.core.table_parts import write_streamed


def test_string_and_large_string_parts_make_one_file(tmp_path):
    # a block with mined positives concatenated its path column as large_string, one
    # without as string: both are text, and the file is their rows end to end
    pq.write_table(pa.table({"anchor_path": pa.array(["a", "b"], pa.string()),
                             "neg_score": pa.array([0.5, None], pa.float64())}),
                   tmp_path / "p0.parquet")
    pq.write_table(pa.table({"anchor_path": pa.array(["c"], pa.large_string()),
                             "neg_score": pa.array([0.25], pa.float64())}),
                   tmp_path / "p1.parquet")
    write_streamed(tmp_path, ["p0.parquet", "p1.parquet"], tmp_path / "out.parquet", False)
    out = pd.read_parquet(tmp_path / "out.parquet")
    assert out["anchor_path"].tolist() == ["a", "b", "c"]
    assert out["neg_score"].iloc[[0, 2]].tolist() == [0.5, 0.25]


def test_numbers_of_two_types_are_not_merged_silently(tmp_path):
    pq.write_table(pa.table({"anchor_id": pa.array([1], pa.int64())}), tmp_path / "p0.parquet")
    pq.write_table(pa.table({"anchor_id": pa.array([1.5], pa.float64())}),
                   tmp_path / "p1.parquet")
    try:
        write_streamed(tmp_path, ["p0.parquet", "p1.parquet"], tmp_path / "o.parquet", False)
    except pa.ArrowTypeError:
        pass
    else:
        raise AssertionError("an int column and a float column were merged")
    assert not (tmp_path / "o.parquet").exists()
