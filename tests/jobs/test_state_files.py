"""Moving a bad state file aside."""

from __future__ import annotations

from pathlib import Path

from exporter.jobs.state_files import move_aside


def test_files_moved_aside_in_the_same_second_keep_apart(tmp_path: Path) -> None:
    """The aside name has second resolution: a second bad file of that name in that second replaced the
    first, which was then lost."""
    path = tmp_path / "job.json"
    asides = []
    for text in ("first", "second", "third"):
        path.write_text(text, encoding="utf-8")
        asides.append(move_aside(path, "job record", "not valid JSON", clock=lambda: 1_700_000_000.0))
    assert [aside.read_text(encoding="utf-8") for aside in asides if aside] == ["first", "second", "third"]
    assert [aside.name for aside in asides if aside] == [
        "job.json.bad-20231114T221320Z",
        "job.json.bad-20231114T221320Z-2",
        "job.json.bad-20231114T221320Z-3",
    ]
