"""pairkit mine: anchors, positives and hard (or easy) negatives -> a pair table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from pairkit.cli.common import ProgressBar, say, user_errors, warn


def mine(
    store: Path = typer.Argument(..., help="Store folder (from embed or import)."),
    output: str = typer.Option(
        ..., "-o", "--output", help="Pair table: .parquet, .csv, .jsonl, or - (JSON Lines)."),
    hard: bool = typer.Option(
        False, "--hard", help="Hard negatives from a kNN search (default: easy, uniform)."),
    relation: str | None = typer.Option(
        None, "--relation",
        help="instance | label | pairs:FILE. Default: instance when sources have several "
        "views, else label when labels exist."),
    fmt: str = typer.Option("triplet", "--format", help="triplet | n-tuple | labeled-pair."),
    num_negatives: int = typer.Option(5, "--num-negatives", "-k", help="Negatives per anchor."),
    range_min: int | None = typer.Option(
        None, "--range-min", help="First valid-candidate rank to use (0 = hardest). Default 0."),
    range_max: int | None = typer.Option(
        None, "--range-max",
        help="End of the rank window (exclusive). Default: range-min + K (top), + 10K "
        "(random/softmax)."),
    min_score: float | None = typer.Option(None, "--min-score", help="Drop candidates below."),
    max_score: float | None = typer.Option(None, "--max-score", help="Drop candidates above."),
    absolute_margin: float | None = typer.Option(
        None, "--absolute-margin", help="Keep negatives with score <= weakest positive - m."),
    relative_margin: float | None = typer.Option(
        None, "--relative-margin",
        help="Keep negatives with score <= pos - m * |pos| (pos = weakest positive)."),
    sampling: str | None = typer.Option(
        None, "--sampling", help="top | random | softmax over the window. Default top."),
    temperature: float | None = typer.Option(
        None, "--sampling-temperature", help="Softmax temperature (default 0.05)."),
    positive: str = typer.Option(
        "weakest", "--positive", help="Row positive: weakest (hardest) or random (seeded)."),
    max_positives: int = typer.Option(
        64, "--max-positives", help="Label relation: positives sampled per anchor."),
    seed: int = typer.Option(0, "--seed", help="Seed of every random choice."),
    index: str = typer.Option(
        "auto", "--index", help="auto | flat | ivf | ivfpq | hnsw (auto: exact up to "
        "--exact-max-rows)."),
    nprobe: int | None = typer.Option(None, "--nprobe", help="IVF cells scanned per query."),
    ef_search: int | None = typer.Option(None, "--ef-search", help="HNSW search beam."),
    nlist: int | None = typer.Option(None, "--nlist", help="IVF cells (default ~sqrt(N))."),
    exact_max_rows: int | None = typer.Option(
        None, "--exact-max-rows",
        help="--index auto: exact up to this many rows (default 50,000 CPU, 1,000,000 GPU)."),
    gpu: bool | None = typer.Option(
        None, "--gpu/--no-gpu", help="FAISS on all visible GPUs (default: when FAISS sees one)."),
    float16: bool = typer.Option(False, "--float16", help="Store index vectors in float16."),
    batch_size: int = typer.Option(16384, "--batch-size", help="Anchors per search batch."),
    backend: str = typer.Option(
        "auto", "--backend",
        help="Search engine: auto (FAISS GPU indices when faiss-gpu sees a GPU, else the exact "
        "torch search on CUDA when torch sees one, else FAISS on the CPU), faiss or torch."),
    filter_fn: bool = typer.Option(
        False, "--filter-false-negatives", help="Flag likely false negatives among candidates."),
    fn_rules: str | None = typer.Option(
        None, "--fn-rules", help="Comma list of rules: label, near-duplicate, margin, cluster, "
        "support, community (default: label,near-duplicate,community; see docs/methods.md)."),
    keep_flagged: bool = typer.Option(
        False, "--keep-flagged",
        help="Keep flagged candidates as negatives, with false_negative/fn_reason columns."),
    fn_mode: str = typer.Option(
        "eliminate", "--fn-mode",
        help="eliminate (drop flagged) | attract (flagged become extra positive rows)."),
    fn_margin: float | None = typer.Option(
        None, "--fn-margin", help="margin rule: flag score > pos - (1 - m)|pos| (default .95)."),
    fn_near_dup_threshold: float | None = typer.Option(
        None, "--fn-near-dup-threshold",
        help="near-duplicate rule: cosine (default: dedup's, 0.965)."),
    fn_cluster_k: str | None = typer.Option(
        None, "--fn-cluster-k",
        help="cluster rule: clusters per k-means run, auto (the most stable count) or N[,N..]."),
    fn_cluster_runs: int | None = typer.Option(
        None, "--fn-cluster-runs", help="cluster rule: seeded k-means runs per count (5)."),
    fn_cluster_votes: int | None = typer.Option(
        None, "--fn-cluster-votes", help="cluster rule: runs that must put both together (1)."),
    fn_support_threshold: float | None = typer.Option(
        None, "--fn-support-threshold", help="support rule: similarity threshold (0.5)."),
    fn_support_aggregate: str | None = typer.Option(
        None, "--fn-support-aggregate", help="support rule: mean or max (default max)."),
    fn_community_neighbors: int | None = typer.Option(
        None, "--fn-community-neighbors",
        help="community rule: neighbours per item in the kNN graph (default 15)."),
    stats_path: Path | None = typer.Option(None, "--stats", help="Write the summary as JSON."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing outputs."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or summary."),
) -> None:
    """Mine anchor / positive / negative pairs from a store.

    Anchors: every item with at least one positive under the relation.

    Example: pairkit mine store --hard -k 5 -o pairs.parquet --stats stats.json
    """
    from pairkit.errors import UsageError

    with user_errors():
        from pairkit.index.backend import check_backend_text

        check_backend_text(backend)
        if not hard:
            for name, value in (("--range-min", range_min), ("--range-max", range_max),
                                ("--sampling", sampling),
                                ("--sampling-temperature", temperature),
                                ("--index", None if index == "auto" else index),
                                ("--nprobe", nprobe), ("--ef-search", ef_search),
                                ("--nlist", nlist), ("--exact-max-rows", exact_max_rows)):
                if value is not None:
                    raise UsageError(f"{name} applies to --hard only")
        fn_given = [n for n, v in (
            ("--fn-rules", fn_rules), ("--keep-flagged", keep_flagged or None),
            ("--fn-mode", None if fn_mode == "eliminate" else fn_mode),
            ("--fn-margin", fn_margin), ("--fn-near-dup-threshold", fn_near_dup_threshold),
            ("--fn-cluster-k", fn_cluster_k), ("--fn-cluster-runs", fn_cluster_runs),
            ("--fn-cluster-votes", fn_cluster_votes),
            ("--fn-support-threshold", fn_support_threshold),
            ("--fn-support-aggregate", fn_support_aggregate),
            ("--fn-community-neighbors", fn_community_neighbors)) if v is not None]
        if fn_given and not filter_fn:
            raise UsageError(f"{fn_given[0]} needs --filter-false-negatives")
        if keep_flagged and fn_mode == "attract":
            raise UsageError("--keep-flagged and --fn-mode attract contradict: choose one")
        if stats_path is not None and str(stats_path) == output:
            raise UsageError("--stats and -o must be different files")
        from pairkit.mine.hard_negatives import IndexOptions, MineConfig

        cfg = MineConfig(
            num_negatives=num_negatives, hard=hard, range_min=range_min or 0,
            range_max=range_max, min_score=min_score, max_score=max_score,
            absolute_margin=absolute_margin, relative_margin=relative_margin,
            sampling=sampling or "top",
            sampling_temperature=temperature if temperature is not None else 0.05,
            positive=positive, max_positives=max_positives, seed=seed, batch_size=batch_size,
            fn_mode=fn_mode, keep_flagged=keep_flagged)
        idx = IndexOptions(kind=index, nprobe=nprobe, ef_search=ef_search, nlist=nlist,
                           exact_max_rows=exact_max_rows, gpu=gpu, float16=float16,
                           backend=backend)
        fn_config = _fn_config(
            filter_fn, fn_rules, margin=fn_margin, near_duplicate_threshold=fn_near_dup_threshold,
            cluster_votes=fn_cluster_votes, support_threshold=fn_support_threshold,
            support_aggregate=fn_support_aggregate, cluster_k=fn_cluster_k,
            cluster_runs=fn_cluster_runs,
            community_neighbors=fn_community_neighbors)
        try:
            _run(store, output, relation, fmt, cfg, idx, fn_config, stats_path, force, quiet)
        except BrokenPipeError:
            # the reader of stdout went away (e.g. `| head`): not an error
            import os
            import sys

            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())


def _fn_config(filter_fn: bool, rules: str | None, cluster_k: str | None,
               **params: Any) -> Any:
    """The FalseNegativeConfig for the --fn-* options (None without filtering)."""
    if not filter_fn:
        return None
    from pairkit.cli.common import parse_int_list
    from pairkit.mine.false_negatives import FalseNegativeConfig, parse_rules

    fields: dict[str, Any] = {k: v for k, v in params.items() if v is not None}
    if rules is not None:
        fields["rules"] = parse_rules(rules)
    if cluster_k is not None and cluster_k.strip().lower() != "auto":
        fields["cluster_ks"] = tuple(parse_int_list(cluster_k, "--fn-cluster-k"))
    return FalseNegativeConfig(**fields)


def _run(store: Path, output: str, relation: str | None, fmt: str, cfg: Any, idx: Any,
         fn_config: Any, stats_path: Path | None, force: bool, quiet: bool) -> None:
    from pairkit.core.atomic import atomic_open, check_output
    from pairkit.core.store import Store
    from pairkit.core.tables import table_kind, write_table
    from pairkit.mine.hard_negatives import mine_store

    table_kind(output)  # fail on a bad extension before any work
    if output != "-":
        check_output(output, force)
    if stats_path is not None:
        check_output(stats_path, force, what="stats file")
    st = Store.open(store, verify=True)
    bar = ProgressBar(quiet, unit="anchors")
    try:
        table, stats = mine_store(st, relation, cfg, idx, fn_config, fmt, progress=bar.advance,
                                  on_start=lambda n: bar.start(n, "mining"))
    finally:
        bar.stop()
    if stats.get("pairs_rows_unknown"):
        warn(f"pairs file: {stats['pairs_rows_unknown']} of {stats['pairs_rows']} rows name "
             f"paths not in the store (e.g. {', '.join(stats['pairs_unknown_examples'])}); "
             "mined the rest")
    write_table(table, output, force=force)
    if stats_path is not None:
        with atomic_open(stats_path) as fh:
            json.dump(stats, fh, indent=2)
            fh.write("\n")
    for line in summary_lines(stats, output):
        say(line, quiet)


def summary_lines(stats: dict[str, Any], output: str) -> list[str]:
    """The human summary printed on stderr."""
    per = stats["negatives_per_anchor"]
    lines = [
        f"mined {stats['rows']:,} rows ({stats['format']}) for {stats['anchors']:,} anchors "
        f"-> {output}",
        f"relation: {stats['relation']}; index: {stats['index']}",
        f"negatives per anchor: mean {per['mean']:.2f}, min {per['min']}, max {per['max']}; "
        f"{stats['anchors_short']:,} anchors with fewer than K",
    ]
    for key, label in (("pos_score", "positive"), ("neg_score", "negative")):
        q = stats.get(key)
        if q:
            lines.append(f"{label} scores: min {q['q00']:.3f}  q25 {q['q25']:.3f}  median "
                         f"{q['q50']:.3f}  q75 {q['q75']:.3f}  max {q['q100']:.3f}")
    if stats.get("rank_histogram"):
        hist = ", ".join(f"{k}: {v}" for k, v in stats["rank_histogram"].items() if v)
        lines.append(f"negative rank histogram: {hist}")
    removed = ", ".join(f"{k} {v:,}" for k, v in stats["removed"].items() if v)
    lines.append(f"candidates removed: {removed or 'none'}")
    if stats.get("false_negative_rules"):
        flagged = ", ".join(f"{k} {v:,}" for k, v in stats["fn_flagged"].items()) or "none"
        lines.append(f"false negatives flagged ({stats['fn_mode']}): {flagged}"
                     + (f"; {stats['attracted']:,} attracted as positives"
                        if stats.get("attracted") else ""))
    est = stats.get("fn_estimate") or {}
    if est.get("hidden_positive_recall") is not None:
        lines.append(
            f"false-negative estimate (no labels used): the rules flag "
            f"{est['hidden_positive_recall']:.1%} of hidden positives (other views of "
            f"{est['anchors']:,} anchors) and {est['random_pair_flag_rate']:.1%} of random pairs"
            + (f" (random pairs sharing a label: {est['random_pair_same_label']:.1%})"
               if est.get("random_pair_same_label") is not None else ""))
    if stats.get("negatives_same_label") is not None:
        lines.append(f"negatives sharing their anchor's label: "
                     f"{stats['negatives_same_label']:.1%}")
    if stats.get("retries"):
        lines.append(f"{stats['anchors_retried']:,} anchors searched again with a larger k "
                     f"(up to {stats['k_max']:,})")
    return lines
