"""Parts committed as one parquet file: their schemas unified as pandas reads them."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pairkit.core.table_parts import commit_parts, write_streamed


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


def _parts(folder, rows):
    """Parts of ``rows`` rows each (ids numbered on), and a side file, in ``folder``."""
    folder.mkdir()
    names, start = [], 0
    for i, n in enumerate(rows):
        pd.DataFrame({"anchor_id": list(range(start, start + n))}, dtype="int64").to_parquet(
            folder / f"p{i}.parquet", index=False)
        names.append(f"p{i}.parquet")
        start += n
    (folder / ".keys-00000.npz").write_bytes(b"side")
    return names


def test_parts_of_one_row_are_kept_and_side_files_left_out(tmp_path):
    """Parts of 1, 0 and 2 rows committed as a file and as a dataset folder: every row,
    in order; only the empty part is left out, and the run's side files (a leading dot)
    are not in the dataset (hunt 3b: dropping one-row parts, and keeping the side files,
    survived)."""
    names = _parts(tmp_path / "a", [1, 0, 2])
    commit_parts(tmp_path / "a", names, [1, 0, 2], str(tmp_path / "t.parquet"), False)
    assert pd.read_parquet(tmp_path / "t.parquet")["anchor_id"].tolist() == [0, 1, 2]
    names = _parts(tmp_path / "b", [1, 0, 2])
    commit_parts(tmp_path / "b", names, [1, 0, 2], str(tmp_path / "ds") + "/", False)
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == [
        "part-00000.parquet", "part-00001.parquet"]
    assert pd.read_parquet(tmp_path / "ds")["anchor_id"].tolist() == [0, 1, 2]
