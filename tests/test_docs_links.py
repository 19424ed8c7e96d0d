"""Links in README.md and docs/ lead somewhere: a docs page links its neighbours relatively
(the site and GitHub both resolve them), the README links absolutely (the package index shows
it away from the repository), and every link into the repository names a file and heading
that exist. ``mkdocs build --strict`` checks docs/ again in .ci/run; this runs with the tests."""

from __future__ import annotations

import re
import unicodedata
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
REPO_URL = "https://github.com/compozy/compozy-memory"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```\s*$", re.S | re.M)


def links(page: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", page.read_text()))


def slug(heading: str) -> str:
    """The anchor Python-Markdown's toc gives a heading (its default slugify)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


@cache
def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+?)\s*$", FENCE.sub("", page.read_text()), re.M):
        base = slug(heading)
        name, n = base, 0
        while name in found:  # a repeated heading gets _1, _2...
            n += 1
            name = f"{base}_{n}"
        found.add(name)
    return found


def check_target(path: Path, anchor: str, where: str) -> None:
    assert path.exists(), f"{where}: no such file {path.relative_to(ROOT)}"
    if anchor and path.suffix == ".md":
        assert anchor in anchors(path), f"{where}: {path.relative_to(ROOT)} has no #{anchor}"


def check_repository_url(url: str, where: str) -> None:
    rest = url.removeprefix(REPO_URL)
    if rest in ("", "/", "#readme") or re.match(r"/(issues|releases|pulls)\b", rest):
        return
    match = re.fullmatch(r"/(?:blob|tree)/main/([^#]+)(?:#(.*))?", rest)
    assert match, f"{where}: {url} is not a file of the repository on main"
    check_target(ROOT / match.group(1), match.group(2) or "", where)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_docs_links_resolve(page: Path) -> None:
    where = page.relative_to(ROOT).as_posix()
    for url in links(page):
        if url.startswith(REPO_URL):
            check_repository_url(url, where)
        elif re.match(r"[a-z]+:", url):
            assert url.startswith("https://"), f"{where}: {url}"
        else:
            path, _, anchor = url.partition("#")
            target = (page.parent / path).resolve() if path else page
            assert target.is_relative_to(DOCS), (
                f"{where}: {url} leaves docs/ (the site has no such page): link it as {REPO_URL}/"
                "blob/main/..."
            )
            check_target(target, anchor, where)


def test_readme_links_are_absolute_and_resolve() -> None:
    found = links(ROOT / "README.md")
    assert len(found) >= 10
    for url in found:
        assert url.startswith("https://"), f"README.md: {url} is broken on the package index"
        if url.startswith(REPO_URL):
            check_repository_url(url, "README.md")


def test_every_docs_page_is_in_the_site_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    missing = [p.relative_to(DOCS).as_posix() for p in PAGES]
    missing = [name for name in missing if f": {name}\n" not in nav]
    assert not missing, f"add to mkdocs.yml nav: {missing}"


def test_nothing_points_at_the_shared_folder() -> None:
    texts = [ROOT / "README.md", ROOT / "mkdocs.yml", *PAGES]
    texts += list((ROOT / "compozy_memory").rglob("*.py"))
    offenders = [
        p.relative_to(ROOT).as_posix()
        for p in texts
        if re.search(r"\.\./shared\b|/work/shared\b", p.read_text())
    ]
    assert not offenders


def test_the_anchor_slugs_are_the_ones_the_site_makes() -> None:
    assert slug("Metrics, the exporter and logs") == "metrics-the-exporter-and-logs"
    assert slug("`compozy-memory acl`: ACL users") == "compozy-memory-acl-acl-users"
    assert "no-such-heading" not in anchors(DOCS / "operations.md")
