"""pairkit mine: anchors, positives and hard (or easy) negatives -> a pair table."""

from __future__ import annotations

from typing import Literal

import typer

from pairkit.cli import common as c
from pairkit.cli import mine_options as mo
from pairkit.cli import options as o
from pairkit.cli.progress import ProgressBar


def mine(
    store: str = typer.Argument(..., help="Store folder or URL (s3://...; from embed or import)."),
    output: str = o.table_output_option(),
    hard: bool = typer.Option(
        False, "--hard", help="Hard negatives from a kNN search (without: easy, uniform)."),
    relation: str | None = typer.Option(
        None, "--relation", help="instance | label | pairs:FILE.",
        show_default="instance when sources have several views, else label when labeled"),
    fmt: Literal["triplet", "n-tuple", "labeled-pair"] = typer.Option(
        "triplet", "--format", help="Table layout."),
    num_negatives: int = typer.Option(5, "--num-negatives", "-k", help="Negatives per anchor."),
    range_min: int | None = typer.Option(
        None, "--range-min", help="First valid-candidate rank to use (0 = hardest).",
        show_default="0"),
    range_max: int | None = typer.Option(
        None, "--range-max", help="End of the rank window (exclusive).",
        show_default="range-min + K (top), + 10K (random, softmax)"),
    min_score: float | None = typer.Option(None, "--min-score", help="Drop candidates below."),
    max_score: float | None = typer.Option(None, "--max-score", help="Drop candidates above."),
    absolute_margin: float | None = typer.Option(
        None, "--absolute-margin", help="Keep negatives with score <= weakest positive - m."),
    relative_margin: float | None = typer.Option(
        None, "--relative-margin", help="Keep negatives with score <= pos - m * |pos|."),
    sampling: Literal["top", "random", "softmax"] | None = typer.Option(
        None, "--sampling", help="How K negatives are taken from the window.",
        show_default="top"),
    temperature: float | None = typer.Option(
        None, "--sampling-temperature", help="Softmax temperature.", show_default="0.05"),
    positive: Literal["weakest", "random"] = typer.Option(
        "weakest", "--positive", help="Row positive: weakest (hardest) or random (seeded)."),
    max_positives: int = typer.Option(64, "--max-positives", help="Label relation: positives."),
    seed: int = typer.Option(0, "--seed", help="Seed of every random choice."),
    index: o.IndexKind = typer.Option(
        "auto", "--index", help="Index kind; auto: exact up to --exact-max-rows rows."),
    device: str = o.device_option("Where the search runs; auto: a GPU, else CPU.", False),
    dtype: o.Dtype | None = typer.Option(
        None, "--dtype", help="Precision of the index's vectors (float16: candidates "
        "are re-scored exactly; without it a saved float16 index is used).",
        show_default="float32"),
    nprobe: int | None = typer.Option(None, "--nprobe", help="IVF cells scanned per query.",
                                      show_default="the saved index's, else max(8, nlist/32)"),
    ef_search: int | None = typer.Option(None, "--ef-search", help="HNSW search beam.",
                                         show_default="128"),
    nlist: int | None = typer.Option(None, "--nlist", help="IVF cells.",
                                     show_default="about sqrt(N)"),
    exact_max_rows: int | None = typer.Option(
        None, "--exact-max-rows", help="--index auto: exact search up to this many rows.",
        show_default="50,000 on CPU, 1,000,000 on GPU"),
    batch_size: int = typer.Option(16384, "--batch-size", help="Anchors per search batch."),
    backend: o.Backend = o.backend_option(),
    filter_fn: bool = typer.Option(
        False, "--filter-false-negatives", help="Flag likely false negatives among candidates."),
    fn_rules: str | None = typer.Option(
        None, "--fn-rules", help="Comma list of label, near-duplicate, mutual-neighbour, margin, "
        "cluster, community.", show_default="label,near-duplicate,mutual-neighbour,cluster"),
    fn_mode: o.FnMode = typer.Option(
        "eliminate", "--fn-mode", help="Flagged candidates: eliminate (dropped), attract "
        "(extra positive rows) or keep (negatives, with false_negative/fn_reason columns)."),
    fn_margin: float | None = typer.Option(None, "--fn-margin", show_default="0.95",
                                           help="margin rule: flag score > pos - (1 - m)|pos|."),
    fn_near_dup_threshold: float | None = mo.fn_near_dup_threshold_option(),
    fn_cluster_k: str | None = typer.Option(
        None, "--fn-cluster-k", help="cluster rule: clusters per k-means run, auto (read off "
        "the kNN graph's spectrum) or N[,N..].", show_default="auto"),
    fn_cluster_runs: int | None = typer.Option(
        None, "--fn-cluster-runs", help="cluster rule: k-means runs per count.", show_default="8"),
    fn_cluster_votes: int | None = mo.fn_cluster_votes_option(),
    fn_cluster_diffusion: float | None = mo.fn_cluster_diffusion_option(),
    fn_community_neighbours: int | None = typer.Option(
        None, "--fn-community-neighbours", help="community rule: kNN graph neighbours.",
        show_default="15"),
    positives: int | None = typer.Option(None, "--positives", help="Mined positives per anchor "
        "(rows positive_kind=mined).", show_default="10 with --filter-false-negatives, else 0"),
    positive_neighbours: int | None = typer.Option(
        None, "--positive-neighbours", help="Mutual-test depth.", show_default="10"),
    positive_whitening: float | None = typer.Option(None, "--positive-whitening", help="Power of "
        "the partial PCA whitening of the mutual test (0: plain cosine).", show_default="0.25"),
    stats_path: str | None = typer.Option(None, "--stats",
                                           help="Write the summary as JSON (- = stdout)."),
    ray: str | None = o.ray_option(),
    force: bool = typer.Option(False, "--force", help="Overwrite existing outputs."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or summary."),
) -> None:
    """Mine anchor / positive / negative pairs from a store. Anchors: every item with at
    least one positive under the relation.

    Example: pairkit mine store --hard -k 5 -o pairs.parquet --stats stats.json
    """
    from pairkit.core.devices import where_it_runs
    from pairkit.index.options import IndexOptions
    from pairkit.mine.command import mine_to_files
    from pairkit.mine.config import MineConfig, check_given, fn_config, positive_config
    from pairkit.mine.summary import summary_lines
    with c.user_errors():
        where_it_runs(device, ray)
        check_given({
            "--range-min": range_min, "--range-max": range_max, "--sampling": sampling,
            "--sampling-temperature": temperature, "--index": None if index == "auto" else index,
            "--nprobe": nprobe, "--ef-search": ef_search, "--nlist": nlist,
            "--exact-max-rows": exact_max_rows, "--dtype": dtype if dtype == "float16" else None,
            "--fn-rules": fn_rules, "--fn-mode": None if fn_mode == "eliminate" else fn_mode,
            "--fn-margin": fn_margin, "--fn-near-dup-threshold": fn_near_dup_threshold,
            "--fn-cluster-k": fn_cluster_k, "--fn-cluster-runs": fn_cluster_runs,
            "--fn-cluster-votes": fn_cluster_votes, "--fn-cluster-diffusion": fn_cluster_diffusion,
            "--fn-community-neighbours": fn_community_neighbours}, hard, filter_fn)
        cfg = MineConfig(
            num_negatives=num_negatives, hard=hard, range_min=range_min or 0, range_max=range_max,
            min_score=min_score, max_score=max_score, absolute_margin=absolute_margin,
            relative_margin=relative_margin, sampling=sampling or "top", fn_mode=fn_mode,
            sampling_temperature=temperature if temperature is not None else 0.05, seed=seed,
            positive=positive, max_positives=max_positives, batch_size=batch_size)
        idx = IndexOptions(kind=index, nprobe=nprobe, ef_search=ef_search, nlist=nlist,
                           exact_max_rows=exact_max_rows, device=device,
                           float16=None if dtype is None else dtype == "float16",
                           backend=backend)
        fn = fn_config(filter_fn, fn_rules, fn_cluster_k, margin=fn_margin,
                       near_duplicate_threshold=fn_near_dup_threshold, cluster_runs=fn_cluster_runs,
                       cluster_votes=fn_cluster_votes, cluster_diffusion=fn_cluster_diffusion,
                       community_neighbours=fn_community_neighbours)
        if ray:  # the Ray layer is imported only with --ray
            from pairkit.distributed.mine import RayMine
        executor = RayMine(ray) if ray else None
        pos = positive_config(positives, positive_neighbours, fn, positive_whitening)
        bar = ProgressBar(quiet, unit="anchors")
        try:
            stats = mine_to_files(store, output, cfg, relation=relation, fmt=fmt, index=idx,
                                  fn_config=fn, positives=pos, stats_path=stats_path, force=force,
                                  progress=bar.advance, on_start=lambda n: bar.start(n, "mining"),
                                  on_warning=bar.note, executor=executor)
        finally:
            bar.stop()
        for line in summary_lines(stats, output):
            c.say(line, quiet)
