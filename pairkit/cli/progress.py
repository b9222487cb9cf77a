"""Progress bars on stderr (rich); none when quiet or when stderr is not a terminal."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pairkit.cli.common import console, say, warn

if TYPE_CHECKING:
    from rich.progress import Progress


def make_progress(quiet: bool, unit: str = "images") -> Progress | None:
    """A rich progress bar on stderr with a rate column; None when quiet or when stderr is
    not a terminal (a bar there only leaves a blank line in the log)."""
    if quiet or not console().is_terminal:
        return None
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class RateColumn(ProgressColumn):
        def render(self, task: Any) -> Text:
            speed = task.finished_speed or task.speed
            return Text(f"{speed:,.1f} {unit}/s" if speed else f"- {unit}/s")

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console(),
        transient=False,
    )


class ProgressBar:
    """One task of a rich progress bar on stderr (nothing at all when quiet).

    ``start``/``advance``/``note``/``stop`` is the progress hook the core loops call;
    ``print`` writes a line above a live bar instead of through it.
    """

    def __init__(self, quiet: bool, unit: str = "images") -> None:
        self.progress = make_progress(quiet, unit)
        self.task: Any = None

    def start(self, total: int, description: str) -> None:
        if self.progress is not None:
            self.progress.start()
            self.task = self.progress.add_task(description, total=total)

    def advance(self, n: int, description: str | None = None) -> None:
        if self.progress is not None and self.task is not None:
            if description is None:
                self.progress.advance(self.task, n)
            else:
                self.progress.update(self.task, advance=n, description=description)

    def print(self, line: str) -> None:
        if self.progress is not None:
            self.progress.console.print(line, markup=False)
        else:
            say(line)

    def phase(self, line: str) -> None:
        """A line saying what a long step does now: on the terminal only (nothing when
        quiet or when stderr is not a terminal, like the bar itself)."""
        if self.progress is not None:
            self.progress.console.print(line, markup=False)

    def note(self, message: str) -> None:
        if self.progress is not None and self.progress.live.is_started:
            self.progress.console.print(f"warning: {message}", markup=False, style="yellow")
        else:
            warn(message)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
