"""pairkit embed: image folder -> embedding store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import typer

from pairkit.cli.common import say, user_errors, warn
from pairkit.cli.options import Dtype, device_option, ray_option
from pairkit.cli.progress import ProgressBar
from pairkit.core.devices import where_it_runs

Precision = Literal["auto", "fp32", "fp16", "bf16"]


def embed(
    images: str = typer.Argument(
        ..., help="Folder of images (searched recursively; or an s3:// prefix), webdataset "
        "tar shards (a .tar or a brace pattern such as 'shards/{00000..00099}.tar'), or a "
        "Hugging Face dataset (a save_to_disk folder, a .parquet or .arrow file)."),
    output: str = typer.Option(..., "-o", "--output",
                               help="Store folder or URL (s3://...) to create or resume."),
    model: str = typer.Option(
        "openclip/ViT-B-32", "--model", "-m",
        help="Encoder: openclip/NAME, timm/NAME, or pixels (weight-free, offline).",
    ),
    pretrained: str | None = typer.Option(
        None, "--pretrained", help="Weights tag (open_clip / timm tag); 'none' = random weights; "
        "beside an open_clip --checkpoint: the tag whose preprocessing the file's weights take.",
        show_default="the model's default tag, laion2b_s34b_b79k for ViT-B-32"),
    checkpoint: Path | None = typer.Option(
        None, "--checkpoint", help="Local weights: .safetensors or a torch state dict."
    ),
    views: int = typer.Option(
        1, "--views", help="Views per image, 1 or more: view 0 is the plain image, views 1.. "
        "random augmentations."),
    seed: int = typer.Option(0, "--seed", help="Seed of the augmentations (and random weights)."),
    labels: str | None = typer.Option(
        None, "--labels",
        help="'folder' (first sub-folder = label) or a CSV/parquet/JSONL with path,label.",
    ),
    image_column: str | None = typer.Option(
        None, "--image-column", help="Dataset input: the column of image bytes or paths.",
        show_default="the Image feature, else a column named image"),
    label_column: str | None = typer.Option(
        None, "--label-column", help="Dataset input: the label column (ClassLabel names used).",
        show_default="label, when there is one"),
    device: str = device_option("Where the encoder runs; cuda: all GPUs; auto: cuda when "
                                "torch sees a GPU, else cpu.", here=False),
    precision: Precision = typer.Option(
        "auto", "--precision", help="Autocast precision; auto: fp16 on CUDA, fp32 on CPU."),
    image_size: int | None = typer.Option(
        None, "--image-size",
        help="Square input size in pixels the encoder is fed (a CNN with global pooling takes "
        "any; models with a fixed grid, such as ViTs, refuse). Recorded in the store.",
        show_default="the model's own, e.g. 224 for ViT-B-32"),
    batch_size: int = typer.Option(64, "--batch-size", help="Rows (views) per encoder batch."),
    workers: int | None = typer.Option(
        None, "--workers", help="Decoding processes.",
        show_default="from pairkit --threads: 0 on CPU below 4 threads, the threads beside a GPU"),
    dtype: Dtype = typer.Option("float16", "--dtype", help="Storage precision of the store."),
    decode: Literal["auto", "cpu", "gpu"] = typer.Option(
        "auto", "--decode",
        help="Where JPEGs are decoded and views rendered: gpu (nvjpeg + torch on --device; "
        "on a CPU device torchvision's decoder), cpu (PIL in workers), auto (gpu on CUDA). "
        "PNG, WebP, CMYK, EXIF-rotated and broken files always take the PIL path."),
    shard_rows: int = typer.Option(8192, "--shard-rows", help="Rows per shard (resume unit)."),
    max_file_bytes: int = typer.Option(
        256 << 20, "--max-file-bytes",
        help="Skip files larger than this (bytes). Only regular files are read.",
        show_default="268435456 = 256 MiB"),
    force: bool = typer.Option(False, "--force", help="Replace a store made with other options."),
    ray: str | None = ray_option(),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or summary."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON on stdout."),
) -> None:
    """Embed an image folder into a store (resumable: a rerun embeds only what is missing).

    Example: pairkit embed photos/ -o store --model pixels --views 2 --labels folder
    """
    from pairkit.core.shown import shown_text
    from pairkit.encode.embedder import EmbedConfig, embed_folder, summary_dict

    with user_errors():
        where_it_runs(device, ray)
        cfg = EmbedConfig(
            images=images,
            store=output,
            model=model,
            pretrained=pretrained,
            checkpoint=str(checkpoint) if checkpoint else None,
            views=views,
            seed=seed,
            labels=labels,
            device=device,
            precision=precision,
            batch_size=batch_size,
            image_size=image_size,
            workers=workers,
            dtype=dtype,
            decode=decode,
            force=force,
            shard_rows=shard_rows,
            max_file_bytes=max_file_bytes,
            image_column=image_column,
            label_column=label_column,
        )
        executor = None
        if ray:
            from pairkit.distributed.embed import RayEmbed

            executor = RayEmbed(ray)
        hook = ProgressBar(quiet, unit="images")
        try:
            summary = embed_folder(cfg, hook, executor)
        finally:
            hook.stop()
        shown = shown_text(output)  # a newline or ESC in it makes no line or escape
        if summary.images == 0 and summary.already:
            say(f"nothing to embed: all {summary.already} images are already in {shown}"
                + (f"; {summary.skipped} file{'s' if summary.skipped > 1 else ''} still can't "
                   "be embedded" if summary.skipped else ""), quiet)
        else:
            say(
                f"embedded {summary.images} images ({summary.views} views), "
                f"skipped {summary.skipped}, already in store {summary.already}, "
                f"{summary.seconds:.1f} s, {summary.images_per_second:.1f} images/s "
                f"on {summary.device}{' on ' + summary.cluster if summary.cluster else ''} "
                f"-> {shown} ({summary.store_rows} rows)",
                quiet,
            )
        if summary.skipped:
            from pairkit.core.manifest import errors_file
            from pairkit.core.options import plural

            where = (f"the errors object its manifest names in {shown}" if "://" in output
                     else shown_text(str(Path(output) / errors_file(output))))
            say(f"{plural(summary.skipped, 'file')} skipped: see {where}", quiet)
        if summary.missing_from_folder:
            warn(f"{summary.missing_from_folder} images in the store are no longer in "
                 f"{shown_text(images)}")
        if json_out:
            typer.echo(json.dumps(summary_dict(summary)))

