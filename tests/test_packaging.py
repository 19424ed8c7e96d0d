"""What is shipped: the sdist holds what builds the wheel and nothing else (no tests: see
pyproject.toml), and the wheel built from that sdist has everything an installed copy reads
(the Lua scripts, the starter project, py.typed, the console script, the pytest plugin)."""

from __future__ import annotations

import configparser
import io
import tarfile
import zipfile
from pathlib import Path

import pytest

hatchling = pytest.importorskip("hatchling")

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the sdist, the wheel built from the unpacked sdist)."""
    from hatchling.builders.sdist import SdistBuilder
    from hatchling.builders.wheel import WheelBuilder

    out = tmp_path_factory.mktemp("dist")
    (sdist,) = (Path(p) for p in SdistBuilder(str(ROOT)).build(directory=str(out)))
    unpacked = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(sdist) as archive:
        archive.extractall(unpacked, filter="data")
    (source,) = unpacked.iterdir()
    (wheel,) = (Path(p) for p in WheelBuilder(str(source)).build(directory=str(out)))
    return sdist, wheel


def _package_files(folder: str) -> set[str]:
    return {
        str(p.relative_to(ROOT))
        for p in (ROOT / folder).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def test_the_sdist_holds_what_builds_the_wheel_and_nothing_else(
    built: tuple[Path, Path],
) -> None:
    sdist, _ = built
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    files = {n for n in names if not n.endswith("/")}
    top = {n.split("/", 1)[0] for n in files}
    # hatchling adds pyproject.toml, PKG-INFO and the .gitignore (the file list it honours).
    shipped = {"compozy_memory", "lua", "README.md", "LICENSE"}
    assert top == {*shipped, "pyproject.toml", "PKG-INFO", ".gitignore"}
    assert _package_files("compozy_memory") <= files
    assert _package_files("lua") <= files
    assert not any(n.endswith((".png", ".pyc")) or n.startswith("docs/") for n in files)


def test_the_wheel_built_from_the_sdist_has_what_an_install_reads(
    built: tuple[Path, Path],
) -> None:
    _, wheel = built
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        entry_points = archive.read(f"{dist_info}/entry_points.txt").decode()
    lua = {f"compozy_memory/{p}" for p in _package_files("lua")}
    assert lua <= names  # the scripts, inside the package
    starter = {p for p in _package_files("compozy_memory") if "/starter/" in p}
    assert starter <= names
    assert {"compozy_memory/py.typed", "compozy_memory/testing/plugin.py"} <= names
    assert not any(n.startswith(("tests/", "integration/", "benchmarks/")) for n in names)
    parsed = configparser.ConfigParser()
    parsed.read_file(io.StringIO(entry_points))
    assert parsed["console_scripts"]["compozy-memory"] == "compozy_memory._ops.entry:main"
    assert parsed["pytest11"]["compozy_memory"] == "compozy_memory.testing.plugin"
