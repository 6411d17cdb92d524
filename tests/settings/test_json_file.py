"""The bounded JSON file reader that state files and the config's prefill model file are read with."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.settings.json_file import JsonFileError, nesting_depth, read_json_file


@pytest.mark.parametrize("text", ["[" * 50_000, '{"a": [1e999]}', '{"a": NaN}', "[" * 40 + "]" * 40])
def test_the_reader_bounds_depth_and_refuses_non_finite_numbers(tmp_path: Path, text: str) -> None:
    path = tmp_path / "x.json"
    path.write_text(text)
    with pytest.raises(JsonFileError):
        read_json_file(path)


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    assert nesting_depth('{"a": ["[[[[", "\\"]]{{"]}') == 2
