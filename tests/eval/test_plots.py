"""eval --plot figures (issue 20.13): the class legend in label order, and the raw and head
maps told apart inside the figure (its title, and the PNG's Title field), not only by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from pairkit.cli.main import app
from pairkit.eval.plots import label_order, map_figure, scores_figure
from tests.conftest import random_store

runner = CliRunner()


def legend_texts(fig: object) -> list[str]:
    legend = fig.axes[0].get_legend()  # type: ignore[attr-defined]
    return [t.get_text() for t in legend.get_texts()]


def test_label_order_is_natural() -> None:
    assert label_order(["10", "2", "1", "b", "a", "(none)"]) == ["1", "2", "10", "(none)", "a",
                                                                 "b"]
    assert label_order(["cat 12", "cat 3", "Dog"]) == ["cat 3", "cat 12", "Dog"]


def test_map_legend_is_sorted_and_other_comes_last() -> None:
    rng = np.random.default_rng(0)
    # 22 labels, the two rarest ("5" and "7" once each) go grey as "other"
    labels = np.array([str(n) for n in range(22) for _ in range(1 if n in (5, 7) else 3)],
                      dtype=object)
    rng.shuffle(labels)
    xy = rng.normal(size=(len(labels), 2))
    fig = map_figure(xy, labels, "PCA of the raw query embeddings")
    shown = legend_texts(fig)
    kept = [str(n) for n in range(22) if n not in (5, 7)]
    assert shown == [*kept, "other"]
    assert fig.axes[0].get_title() == "PCA of the raw query embeddings"


def test_map_without_labels_has_no_legend() -> None:
    fig = map_figure(np.zeros((3, 2)), None, "t")
    assert fig.axes[0].get_legend() is None


def test_scores_figure_names_what_it_shows() -> None:
    fig = scores_figure({"positive": np.array([0.9, 0.8]), "random_negative": np.array([0.1])},
                        "scores of the embeddings through head h")
    assert fig.axes[0].get_title() == "scores of the embeddings through head h"


def png_title(path: Path) -> str:
    with Image.open(path) as img:
        return str(img.info.get("Title"))


@pytest.mark.parametrize("compare", [True, False])
def test_raw_and_head_figures_say_which_they_are(tmp_path: Path, compare: bool) -> None:
    st = random_store(tmp_path / "s", n_sources=30, views=2, dim=16)
    head = tmp_path / "myhead"
    r = runner.invoke(app, ["train", str(st.root), "-o", str(head), "--relation", "instance",
                            "--epochs", "1", "-q"])
    assert r.exit_code == 0, r.output
    plots = tmp_path / "plots"
    r = runner.invoke(app, ["eval", str(st.root), "--head", str(head), "--metrics", "knn",
                            "--plot", str(plots), "-q", *(["--compare"] if compare else [])])
    assert r.exit_code == 0, r.output
    if compare:
        assert png_title(plots / "raw_map.png") == "PCA of the raw query embeddings (no head)"
        assert png_title(plots / "raw_scores.png") == "scores of the raw embeddings (no head)"
        head_map, head_scores = plots / "head_map.png", plots / "head_scores.png"
    else:
        head_map, head_scores = plots / "map.png", plots / "scores.png"
    assert png_title(head_map) == "PCA of the query embeddings through head myhead"
    assert png_title(head_scores) == "scores of the embeddings through head myhead"


@pytest.fixture(scope="module")
def store_and_head(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("plots")
    st = random_store(root / "s", n_sources=30, views=2, dim=16)
    head = root / "myhead"
    r = runner.invoke(app, ["train", str(st.root), "-o", str(head), "--relation", "instance",
                            "--epochs", "1", "-q"])
    assert r.exit_code == 0, r.output
    return st.root, head


def _compare(store: Path, head: Path, plots: Path, *extra: str):  # noqa: ANN202
    return runner.invoke(app, ["eval", str(store), "--head", str(head), "--metrics", "knn",
                               "--compare", "--plot", str(plots), "-q", *extra])


def test_a_failed_head_run_leaves_no_plots(tmp_path: Path, store_and_head,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """hunt-n 9: the raw run's plots were written before the head run; a failure there left
    half a plot set that the rerun refused ("raw_scores.png exists")."""
    import pairkit.eval.command as command

    store, head = store_and_head
    real = command.evaluate
    calls = []

    def failing(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        if len(calls) == 2:  # the head run
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(command, "evaluate", failing)
    plots = tmp_path / "plots"
    r = _compare(store, head, plots)
    assert r.exit_code != 0 and len(calls) == 2
    assert not plots.exists() or sorted(p.name for p in plots.iterdir()) == []
    monkeypatch.undo()
    r = _compare(store, head, plots)
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in plots.iterdir()) == [
        "head_map.png", "head_scores.png", "raw_map.png", "raw_scores.png"]


def test_plots_written_meanwhile_are_not_replaced(tmp_path: Path, store_and_head,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """hunt-n 8: a concurrent eval's plots in the same --plot folder were replaced without
    --force. Now the run stops with one line and writes none of its plots."""
    import pairkit.eval.command as command

    store, head = store_and_head
    plots = tmp_path / "plots"
    real = command.evaluate

    def meanwhile(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        plots.mkdir(exist_ok=True)
        (plots / "head_map.png").write_bytes(b"another run's")
        return real(*args, **kwargs)

    monkeypatch.setattr(command, "evaluate", meanwhile)
    r = _compare(store, head, plots)
    assert r.exit_code == 1, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "written by another run meanwhile" in lines[0], r.output
    assert sorted(p.name for p in plots.iterdir()) == ["head_map.png"]  # none of this run's
    assert (plots / "head_map.png").read_bytes() == b"another run's"
    r = _compare(store, head, plots, "--force")
    assert r.exit_code == 0, r.output
    assert png_title(plots / "head_map.png") == "PCA of the query embeddings through head myhead"
    assert sorted(p.name for p in plots.iterdir()) == [
        "head_map.png", "head_scores.png", "raw_map.png", "raw_scores.png"]


def test_pca_map_centres_and_samples_across_the_queries(tmp_path: Path, monkeypatch) -> None:
    """The PCA map is scikit-learn's PCA (up to sign) of rows far from the origin; over
    max_points the map draws a seeded sample from all the queries, not the first ones."""
    from sklearn.decomposition import PCA

    import pairkit.eval.plots as plots

    rng = np.random.default_rng(0)
    x = 5.0 + rng.normal(size=(30, 4)) * np.array([3.0, 1.0, 0.3, 0.1])
    want = PCA(n_components=2).fit_transform(x)
    np.testing.assert_allclose(np.abs(plots.pca_2d(x)), np.abs(want), atol=1e-9)
    drawn = []
    monkeypatch.setattr(plots, "map_figure",
                        lambda xy, labels, title: drawn.append(labels) or map_figure(
                            xy, labels, title))
    labels = np.array(["first"] * 50 + ["second"] * 50, dtype=object)
    plots.write_plots(tmp_path, {}, rng.normal(size=(100, 4)).astype(np.float32), labels,
                      max_points=10, seed=3)
    assert len(drawn[0]) == 10 and set(drawn[0]) == {"first", "second"}
