"""The configuration reference's tables (docs/configuration.md), generated from the settings classes.

    python -m sparkpoint_cli.settings_doc           rewrite the tables in docs/configuration.md (``make settings-doc``)
    python -m sparkpoint_cli.settings_doc --check   exit 1 if docs/configuration.md's tables are out of date

A table per program (service), a row per variable it reads in the order
its class defines them: the name, its default there and its meaning (the
field's description). A variable several programs read is in each one's
table; a default computed from other settings shows them as ``<SP_...>``.
tests/unit/test_settings_doc.py fails when the tables differ.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from controller.settings import ControllerSettings
from sparkpoint.devstack import DevStackSettings
from sparkpoint.producer import ProducerSettings
from sparkpoint.settings import Settings
from sparkpoint_cli.settings import CliSettings
from worker.settings import WorkerSettings

PROGRAMS: tuple[type[Settings], ...] = (WorkerSettings, ControllerSettings, ProducerSettings, CliSettings,
                                        DevStackSettings)
REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
BEGIN = "<!-- the settings table: generated from the settings classes by `make settings-doc` -->"
END = "<!-- end of the settings table -->"
PROGRAM_HEADER = "| variable | default | meaning |\n|---|---|---|"


class _Placeholders(dict):
    """What a default computed from other fields sees: each as ``<SP_NAME>``."""

    def __init__(self, cls: type[Settings]) -> None:
        super().__init__()
        self._cls = cls

    def __missing__(self, name: str) -> str:
        return f"<{self._cls.variable(name)}>"


def default_text(cls: type[Settings], name: str) -> str:
    value = cls.model_fields[name].get_default(call_default_factory=True, validated_data=_Placeholders(cls))
    if value is None or value == "":
        return "(unset)"
    return f"`{str(value).lower() if isinstance(value, bool) else value}`"


def variables(programs: tuple[type[Settings], ...] = PROGRAMS) -> list[str]:
    """Every variable the programs read, once; one without a description is refused."""
    found: dict[str, None] = {}
    for cls in programs:
        for name, info in cls.model_fields.items():
            if not info.description:
                raise ValueError(f"{cls.__name__}.{name} ({cls.variable(name)}) has no description")
            found[cls.variable(name)] = None
    return list(found)


def render_table(programs: tuple[type[Settings], ...] = PROGRAMS) -> str:
    """A table per program: each variable it reads, with its default there."""
    variables(programs)     # every one described
    sections = []
    for cls in programs:
        lines = [f"### {cls.program}", "", PROGRAM_HEADER]
        for name, info in cls.model_fields.items():
            lines.append(f"| `{cls.variable(name)}` | {default_text(cls, name)} | {info.description} |")
        sections.append("\n".join(lines))
    return "\n\n".join(sections)


def _table_span(text: str) -> tuple[int, int]:
    """Where a page's generated table is: between the two markers."""
    try:
        start = text.index(BEGIN) + len(BEGIN)
        return start, text.index(END, start)
    except ValueError:
        raise ValueError(f"{REFERENCE.name}: the settings table's markers are missing ({BEGIN} ... {END})") from None


def table_in(text: str) -> str:
    start, end = _table_span(text)
    return text[start:end].strip("\n")


def with_table(text: str, table: str) -> str:
    start, end = _table_span(text)
    return f"{text[:start]}\n{table}\n{text[end:]}"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m sparkpoint_cli.settings_doc", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/configuration.md's table is out of date")
    args = parser.parse_args()
    text, table = REFERENCE.read_text(), render_table()
    if table_in(text) == table:
        return
    if args.check:
        raise SystemExit("docs/configuration.md: the settings table is out of date; run `make settings-doc`")
    REFERENCE.write_text(with_table(text, table))
    print("docs/configuration.md: settings table updated")


if __name__ == "__main__":
    main()
