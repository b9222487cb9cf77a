"""pairkit demo: the whole pipeline on bundled sample data, offline."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import time
from pathlib import Path

import typer

from pairkit.cli.common import console, say, user_errors, warn
from pairkit.errors import PairkitError


def _run_step(args: list[str], capture: bool) -> tuple[int, str]:
    """Run one pairkit command in this process (no new interpreter and torch import per
    step); returns (exit code, captured stdout)."""
    from pairkit.cli.main import app
    from pairkit.cli.options import click_exceptions

    buffer = io.StringIO()
    redirect = contextlib.redirect_stdout(buffer) if capture else contextlib.nullcontext()
    with redirect:
        try:
            result = app(args=args, prog_name="pairkit", standalone_mode=False)
        except typer.Exit as exc:
            result = exc.exit_code
        except click_exceptions().ClickException as exc:
            exc.show()
            result = exc.exit_code
    return (result if isinstance(result, int) else 0), buffer.getvalue()


def demo(
    directory: Path = typer.Argument(..., help="New folder for the sample data and every output."),
    epochs: int = typer.Option(10, "--epochs", help="Training epochs for the head."),
    limit: int | None = typer.Option(None, "--limit", help="Use only the first N digits."),
    seed: int = typer.Option(0, "--seed", help="Seed of the sample data."),
    images_only: bool = typer.Option(
        False, "--images-only", help="Only write the sample images (for your own pipelines)."
    ),
    force: bool = typer.Option(
        False, "--force", help="Replace DIRECTORY if an earlier pairkit demo wrote it."),
    quiet: bool = typer.Option(False, "--quiet", "-q",
                               help="Only errors and warnings: no steps or summary."),
) -> None:
    """Run embed -> dedup -> mine -> train -> eval on scikit-learn's digits, offline.

    Every intermediate file stays in DIRECTORY; each step's command is printed so you can
    rerun it by hand.

    Example: pairkit demo demo-run
    """
    from pairkit.demo import (
        NO_LABEL_RULES,
        check_demo_options,
        demo_steps,
        gain_verdict,
        make_demo_images,
        prepare_demo_dir,
        same_label_share,
        write_planted,
    )

    with user_errors():
        check_demo_options(images_only, epochs)
        prepare_demo_dir(directory, force)
        t0 = time.perf_counter()
        test_root = None if images_only else directory / "test-images"
        made = make_demo_images(directory / "images", limit=limit, seed=seed,
                                test_root=test_root)
        if limit is not None and limit > made.available:
            warn(f"--limit {limit} is more than the {made.available} digits there are: all "
                 f"{made.available} used")
        planted = ", ".join(f"{v} {k}" for k, v in made.duplicates.items())
        say(f"wrote {made.images} digit images in 10 label folders to {directory / 'images'}, "
            f"planted {sum(made.duplicates.values())} near-duplicates ({planted}) and "
            f"{made.broken} broken files"
            + (f"; {made.test_images} held-out digits in {test_root}" if test_root else ""),
            quiet)
        write_planted(directory / "planted.csv", made.planted)
        if images_only:
            return
        evaluation: dict = {}
        for title, args in demo_steps(directory, epochs):
            if quiet:
                args = [*args, "-q"] if "--quiet" not in args else args
            else:
                console().rule(title)
            into = f" > {shlex.quote(str(directory / 'eval.json'))}" if args[0] == "eval" else ""
            say("$ pairkit " + " ".join(shlex.quote(a) for a in args) + into, quiet)
            code, stdout = _run_step(args, capture=args[0] == "eval")
            if code != 0:
                raise PairkitError(f"step failed: pairkit {args[0]} (exit {code})")
            if args[0] == "eval":
                evaluation = json.loads(stdout)
                (directory / "eval.json").write_text(stdout, encoding="utf-8")
        if quiet:  # -q: nothing on success, as every command (docs/development.md)
            return
        console().rule("summary")
        store = directory / "store"
        naive = same_label_share(store, directory / "pairs-naive.parquet")
        unlabelled = same_label_share(store, directory / "pairs-unlabelled.parquet")
        say(f"mined negatives that share the anchor's label (false negatives): naive top-k "
            f"{naive:.1%}, label-free rules ({NO_LABEL_RULES}) {unlabelled:.1%}, "
            f"with labels 0.0% by construction")
        if "raw" in evaluation:
            for key in ("knn_top1", "linear_top1", "precision_at_1", "map_at_r"):
                raw, head = evaluation["raw"].get(key), evaluation["head"].get(key)
                if raw is not None and head is not None:
                    say(f"{key:>16} on held-out digits: raw {raw:.3f} -> head {head:.3f}")
            say(gain_verdict(evaluation["raw"].get("knn_top1"),
                             evaluation["head"].get("knn_top1")))
        say(f"done in {time.perf_counter() - t0:.0f} s; every file is in {directory} "
            "(rerun any step with the commands above)")
        say(f"open {directory / 'report' / 'index.html'} in a browser: the pairs, their "
            "false-negative flags, the duplicates and the scores")
