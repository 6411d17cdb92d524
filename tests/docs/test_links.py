"""Every relative link of README.md and docs/*.md leads to a file of the repository, and an ``#anchor`` to
a heading of that page (GitHub's slugs); README links nothing outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def links(path: Path) -> list[str]:
    return _LINK.findall(_FENCE.sub("", path.read_text(encoding="utf-8")))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces to ``-``."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(m) for m in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}


def test_slug_follows_github() -> None:
    assert (
        slug("One-shot evaluation (`fluidity-exporter bench`)")
        == "one-shot-evaluation-fluidity-exporter-bench"
    )
    assert slug("2. The Secret (create it first)") == "2-the-secret-create-it-first"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for link in links(page):
        if re.match(r"[a-z]+:", link):
            continue
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            broken.append(f"{link}: no file {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{link}: no heading #{anchor} in {path.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_readme_links_nothing_outside_the_repository() -> None:
    """No link with a scheme and no bare URL in its prose (an example command's URL is no link)."""
    readme = REPO / "README.md"
    prose = re.sub(r"`[^`]*`", "", _FENCE.sub("", readme.read_text(encoding="utf-8")))
    outside = [link for link in links(readme) if re.match(r"[a-z]+:", link)]
    outside += re.findall(r"https?://\S+", prose)
    assert not outside, outside
    for link in links(readme):
        assert (REPO / link.partition("#")[0]).resolve().is_relative_to(REPO), link
