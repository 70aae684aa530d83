"""The snippets the docs mark as runnable: ``<!-- runnable -->`` on the line
before a fenced ``sh`` or ``python`` block (the comment is invisible on the
site and on GitHub). ``tests/unit/test_docs.py`` loads the Python ones as
pipelines, ``tests/integration/test_docs_snippets.py`` runs the shell ones
against a local stack, so the docs cannot drift from the product."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = "<!-- runnable -->"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Snippet:
    page: Path
    line: int           # the opening fence's, 1-based
    language: str
    code: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def snippets(language: str) -> list[Snippet]:
    """Every runnable snippet in ``language``, in page order; a mark that is
    not followed by a fenced block raises (a typo must not hide a snippet)."""
    found = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip() != MARK:
                continue
            fence = lines[i + 1].strip() if i + 1 < len(lines) else ""
            if not fence.startswith("```") or fence == "```":
                raise ValueError(f"{page.relative_to(ROOT)}:{i + 1}: {MARK} must be followed by a fenced block "
                                 "naming its language")
            end = next(j for j in range(i + 2, len(lines)) if lines[j].strip() == "```")
            if fence[3:].strip() == language:
                found.append(Snippet(page, i + 2, language, "\n".join(lines[i + 2:end]) + "\n"))
    return found
