"""pairkit eval: kNN, linear probe, retrieval and alignment/uniformity of a store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import typer

from pairkit.cli.common import console, say, user_errors, warn
from pairkit.cli.options import Backend, backend_option, device_option, ray_option
from pairkit.cli.progress import ProgressBar
from pairkit.core.devices import where_it_runs


def eval_store(
    store: str = typer.Argument(
        ..., help="Store to evaluate (the reference side; a folder or URL)."),
    against: str | None = typer.Option(
        None, "--against", help="Test store: its items are the queries, STORE the references."),
    test_fraction: float | None = typer.Option(
        None, "--test-fraction", help="Without --against: fraction of sources held out as "
        "queries.", show_default="0.2"),
    seed: int = typer.Option(0, "--seed", help="Seed of the split, probe validation, samples."),
    head: Path | None = typer.Option(
        None, "--head", help="Head folder (pairkit train): evaluate head(vectors)."),
    compare: bool = typer.Option(False, "--compare",
                                 help="With --head: raw and head side by side."),
    metrics: str | None = typer.Option(
        None, "--metrics", help="Comma list of knn, linear, retrieval, geometry (a listed "
        "metric that cannot run is an error).", show_default="all the data allows"),
    knn_k: str | None = typer.Option(
        None, "--knn-k", help="k of the kNN classifier; a list allowed.",
        show_default="20, at most the reference set's size"),
    knn_temperature: float = typer.Option(0.07, "--knn-temperature",
                                          help="T in exp(sim/T) of the weighted kNN vote."),
    recall_k: str | None = typer.Option(
        None, "--recall-k", help="k values of recall@k.",
        show_default="1,5,10, each at most the set's size"),
    max_r: int = typer.Option(
        1000, "--max-r",
        help="Neighbours looked at for R-precision and MAP@R; queries with more relevant "
        "references than this get lower bounds (the output says how many)."),
    gallery: Literal["reference", "queries"] = typer.Option(
        "reference", "--retrieval-gallery",
        help="reference: queries retrieve from the references; queries: from the other "
        "queries (the query itself excluded)."),
    include_same_source: bool = typer.Option(
        False, "--include-same-source",
        help="Let other views of the query's source count as neighbours."),
    pair_sample: int = typer.Option(100_000, "--pair-sample",
                                    help="Pairs sampled for alignment/uniformity/histograms."),
    probe_max_train: int = typer.Option(200_000, "--probe-max-train",
                                        help="Most reference rows the linear probe trains on."),
    probe_balanced: bool = typer.Option(
        False, "--probe-balanced",
        help="Weigh every class the same in the linear probe's fit (long-tailed references)."),
    device: str = device_option("Where the search, probe and head run; auto: GPUs when "
                                "present (FAISS: the GPUs FAISS sees).", here=False),
    batch_size: int = typer.Option(4096, "--batch-size", help="Queries per search block."),
    backend: Backend = backend_option(),
    ray: str | None = ray_option(),
    plot: Path | None = typer.Option(None, "--plot", help="Folder for PNG histograms and map."),
    map_methods: str = typer.Option(
        "pca", "--map", help="2-D maps --plot draws: pca, umap (pip install umap-learn) or "
        "pca,umap."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing PNGs in --plot."),
    json_out: bool = typer.Option(False, "--json", help="Print the metrics as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress, table or notes."),
) -> None:
    """Measure embeddings: weighted kNN, linear probe, retrieval, alignment/uniformity.

    Example: pairkit eval store --test-fraction 0.2 --knn-k 10,20 --json
    """
    from pairkit.core.options import parse_choices, parse_int_list
    from pairkit.errors import UsageError
    from pairkit.eval.command import eval_to_files
    from pairkit.eval.plots import check_map_methods, parse_maps
    from pairkit.eval.run import METRICS, EvalConfig, SearchHook
    from pairkit.eval.table import metrics_table

    with user_errors():
        where_it_runs(device, ray, here=True)  # the probe and the head run here
        if against is not None and test_fraction is not None:
            raise UsageError("--against and --test-fraction exclude each other")
        if compare and head is None:
            raise UsageError("--compare needs --head")
        maps = parse_maps(map_methods, plot is not None)
        check_map_methods(maps)
        if batch_size < 1:
            raise UsageError(f"--batch-size must be >= 1, got {batch_size}")
        if ray:
            from pairkit.index.backend import ray_search

            ray_search("eval", backend=backend)  # the probe may still use --device
        cfg = EvalConfig(
            knn_ks=None if knn_k is None else tuple(parse_int_list(knn_k, "--knn-k")),
            knn_temperature=knn_temperature,
            recall_ks=None if recall_k is None else tuple(parse_int_list(recall_k, "--recall-k")),
            max_r=max_r,
            exclude_same_source=not include_same_source, gallery=gallery,
            metrics=parse_choices(metrics, METRICS, "--metrics"), pair_sample=pair_sample,
            probe_max_train=probe_max_train, probe_balanced=probe_balanced, seed=seed,
            device=device, backend=backend, block_rows=batch_size, collect_scores=True)
        factory = None
        if ray:
            from pairkit.distributed.search import index_factory

            factory = index_factory(ray)
        bar = ProgressBar(quiet, unit="queries")
        try:
            results, reports = eval_to_files(
                store, plot, cfg, against=against, head=head, compare=compare, maps=maps,
                test_fraction=0.2 if test_fraction is None else test_fraction, force=force,
                index_factory=factory, hook=SearchHook(
                    lambda n: bar.start(n, "searching neighbours"), bar.advance, bar.phase))
        finally:
            bar.stop()
        if not quiet:
            # a note every run has is about the data: said once
            shared = [n for n in next(iter(reports.values())).notes
                      if all(n in r.notes for r in reports.values())]
            for note in shared:
                warn(note)
            for name, report in reports.items():
                prefix = f"{name}: " if len(reports) > 1 else ""
                for note in report.notes:
                    if note not in shared:
                        warn(prefix + note)
                probe = report.metrics.get("linear_probe")
                if probe is not None:
                    how = ("lowest validation log-loss" if probe["validated"]
                           else "no validation split: the first of the list")
                    even = ", every class weighed the same" if probe["balanced"] else ""
                    say(f"{prefix}linear probe weight decay {probe['weight_decay']:g} "
                        f"({how}{even})")
            console().print(metrics_table(results, reports))
            if factory is not None:  # said either way: a cluster given and left unused too
                (say(f"searches on {factory.cluster}") if factory.cluster else
                 warn("--ray: the metrics asked need no search; the cluster was not used"))
            if plot is not None:
                say(f"plots -> {plot}")
        if json_out:
            payload = results if len(results) > 1 else next(iter(results.values()))
            typer.echo(json.dumps(payload))
