"""The installed frameworks' sdists, downloaded from the package index at test time.

Nothing of the frameworks' tests is kept in this repository: ``pip download`` fetches the sdist
of exactly the installed version into a cache directory, which later runs reuse.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib.metadata import version
from pathlib import Path

__all__ = ["sdist_tree"]


def sdist_tree(package: str, cache: Path) -> Path:
    """The unpacked sdist of the installed ``package`` (downloaded on first use)."""
    installed = version(package)
    target = cache / f"{package}-{installed}"
    done = target / ".unpacked"
    if done.exists():
        return _root(target)
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as download:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                "--dest",
                download,
                f"{package}=={installed}",
            ],
            check=True,
        )
        (archive,) = Path(download).glob("*.tar.gz")
        with tarfile.open(archive) as tar:
            tar.extractall(target, filter="data")
    done.touch()
    return _root(target)


def _root(target: Path) -> Path:
    (root,) = (p for p in target.iterdir() if p.is_dir())
    return root
