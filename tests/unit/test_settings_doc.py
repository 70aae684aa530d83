"""The configuration reference's table (docs/configuration.md) is the one the settings classes generate
(sparkpoint_cli.settings_doc), so it stays true."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field

from sparkpoint.settings import Settings
from sparkpoint_cli.settings_doc import BEGIN, END, PROGRAMS, REFERENCE, render_table, table_in, variables, with_table


def test_the_reference_is_generated_from_the_settings_classes():
    assert table_in(REFERENCE.read_text()) == render_table(), "docs/configuration.md is out of date: run `make settings-doc`"


def test_every_variable_of_every_program_is_in_that_programs_table():
    tables = render_table().split("### ")[1:]
    assert [table.splitlines()[0] for table in tables] == [cls.program for cls in PROGRAMS]
    for cls, table in zip(PROGRAMS, tables):
        assert [line.split("`")[1] for line in table.splitlines()[4:] if line] == \
            [cls.variable(name) for name in cls.model_fields]
    assert set(variables()) == {cls.variable(name) for cls in PROGRAMS for name in cls.model_fields}


class _Tool(Settings):
    program = "tool"

    count: int = Field(1, description="how many")
    name: str = Field(default_factory=lambda given: f"tool-{given['count']}", description="its name")
    home: Path | None = Field(None, validation_alias="SP_TOOL_HOME", description="where it lives")
    verbose: bool = Field(False, description="say more")


class _Other(Settings):
    program = "`other`"

    count: int = Field(2, description="how many others")
    verbose: bool = Field(False, description="say more")


def test_each_program_has_a_table_with_its_own_defaults_computed_from_other_variables():
    assert render_table((_Tool, _Other)).splitlines() == [
        "### tool",
        "",
        "| variable | default | meaning |",
        "|---|---|---|",
        "| `SP_COUNT` | `1` | how many |",
        "| `SP_NAME` | `tool-<SP_COUNT>` | its name |",
        "| `SP_TOOL_HOME` | (unset) | where it lives |",
        "| `SP_VERBOSE` | `false` | say more |",
        "",
        "### `other`",
        "",
        "| variable | default | meaning |",
        "|---|---|---|",
        "| `SP_COUNT` | `2` | how many others |",
        "| `SP_VERBOSE` | `false` | say more |",
    ]


def test_a_variable_without_a_description_is_refused():
    class Undocumented(Settings):
        program = "tool"
        count: int = 1

    with pytest.raises(ValueError, match="SP_COUNT"):
        render_table((Undocumented,))


def test_the_table_is_replaced_between_its_markers():
    text = f"# Doc\n\nbefore\n\n{BEGIN}\n| old |\n{END}\n\nafter\n"
    assert with_table(text, "| new |") == f"# Doc\n\nbefore\n\n{BEGIN}\n| new |\n{END}\n\nafter\n"
    assert table_in(with_table(text, "| new |")) == "| new |"
    with pytest.raises(ValueError, match="markers"):
        table_in("no table here")
