"""The layout rules of docs/development.md: tests mirror the package (a test folder per
package folder, plus benchmarks), and no module imports another's private (``_name``)
names, in pairkit or in the tests."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def private_imports(path: Path) -> list[str]:
    """``module:name`` of each ``from module import _name`` in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{node.module}:{alias.name}")
    return found


def test_private_imports_are_found(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("from a.b import _c, d\nfrom e import __version__\nimport f as _g\n")
    assert private_imports(sample) == ["a.b:_c"]


def test_no_private_name_is_imported_across_modules() -> None:
    bad = {str(p.relative_to(ROOT)): private_imports(p)
           for top in ("pairkit", "tests") for p in sorted((ROOT / top).rglob("*.py"))}
    assert {k: v for k, v in bad.items() if v} == {}


def test_test_folders_mirror_the_package() -> None:
    package = {p.name for p in (ROOT / "pairkit").iterdir() if (p / "__init__.py").is_file()}
    tests = {p.name for p in (ROOT / "tests").iterdir()
             if p.is_dir() and not p.name.startswith((".", "_"))}
    assert tests - {"benchmarks"} <= package, sorted(tests - package - {"benchmarks"})


def test_no_merge_conflict_markers_are_committed() -> None:
    """A merge whose conflicts were added as they stood left markers in docs/formats.md
    (2026-12-06): no text file of the project holds one."""
    import re
    import subprocess

    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    names = listed.stdout.split() if listed.returncode == 0 else \
        [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.md")]
    marker = re.compile(r"^(<{7}|>{7}) |^={7}$", re.MULTILINE)
    bad = []
    for name in names:
        path = ROOT / name
        if path.suffix in (".py", ".md", ".toml", ".sh", ".cfg", ".txt", ".yml", ".yaml") \
                and path.is_file() and marker.search(path.read_text(encoding="utf-8",
                                                                     errors="replace")):
            bad.append(name)
    assert bad == []
