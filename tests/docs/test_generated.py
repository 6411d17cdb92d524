"""The generated parts of docs/ (metrics, command flags, layers) are what the code says now:
``python -m scripts.docs --check``, in-process."""

from __future__ import annotations

from scripts import docs


def test_generated_pages_are_current() -> None:
    assert docs.stale() == [], "regenerate with `python -m scripts.docs`"


def test_render_replaces_only_its_region() -> None:
    page = f"intro\n{docs.begin_marker('x')}\nold\n{docs.end_marker('x')}\noutro\n"
    assert (
        docs.render(page, "x", "new")
        == f"intro\n{docs.begin_marker('x')}\nnew\n{docs.end_marker('x')}\noutro\n"
    )
