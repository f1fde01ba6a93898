"""docs/benchmarks.md opens with one table of every benchmark's current figure, and links into
it (and into its history) land on a heading.

The table's rows and the ``##`` sections below it match one for one, so a new benchmark needs
its row; the history file only holds sections the main file has.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs.markdown import anchor, anchors

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
BENCHMARKS = DOCS / "benchmarks.md"
HISTORY = DOCS / "benchmarks-history.md"
COLUMNS = ["benchmark", "command", "target", "current figure", "date", "pass/fail"]
LINK = re.compile(r"\]\(([\w./-]*benchmarks(?:-history)?\.md)#([^)\s]+)\)")


def cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def summary(text: str) -> tuple[list[str], list[list[str]], str]:
    """The summary table's header, its rows, and the text below it."""
    after = text.split("\n## Summary\n", 1)[1]
    lines = after.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))
    header, _, *rows = lines[start:end]
    return cells(header), [cells(r) for r in rows], "\n".join(lines[end:])


def sections(text: str) -> list[str]:
    return [anchor(h) for h in re.findall(r"^## (.+)$", text, re.M)]


def test_the_summary_table_has_a_row_per_section_below_it() -> None:
    header, rows, below = summary(BENCHMARKS.read_text())
    assert header == COLUMNS
    linked = []
    for row in rows:
        assert len(row) == len(COLUMNS), row
        benchmark, command, target, figure, date, verdict = row
        match = re.fullmatch(r"\[[^]]+\]\(#([^)]+)\)", benchmark)
        assert match, f"{benchmark}: not a link to its section"
        linked.append(match[1])
        assert command.startswith("`") and target and figure, row
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", date), row
        assert re.match(r"(pass|fail|—)", verdict), row
    assert linked == sections(below)


def test_the_history_holds_only_sections_of_the_benchmarks() -> None:
    history = sections(HISTORY.read_text())
    assert history and set(history) <= set(sections(BENCHMARKS.read_text()))


def test_links_into_the_benchmarks_land_on_a_heading() -> None:
    targets = {p.name: anchors(p.read_text()) for p in (BENCHMARKS, HISTORY)}
    docs = [*DOCS.glob("*.md"), ROOT / "README.md", ROOT / "charts/mco/README.md"]
    broken = []
    for doc in docs:
        text = doc.read_text()
        for name, fragment in LINK.findall(text):
            if fragment not in targets[Path(name).name]:
                broken.append(f"{doc.relative_to(ROOT)}: {name}#{fragment}")
        if doc.name in targets:  # links within the page itself
            for fragment in re.findall(r"\]\(#([^)\s]+)\)", text):
                if fragment not in targets[doc.name]:
                    broken.append(f"{doc.relative_to(ROOT)}: #{fragment}")
    assert broken == []
