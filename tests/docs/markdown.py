"""Markdown headings as GitHub links them, for the tests that check links into the docs."""

from __future__ import annotations


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading (lower case, spaces to dashes, punctuation gone)."""
    kept = "".join(c for c in heading.strip().lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchor of every heading in ``text`` (outside code fences)."""
    found, fenced = set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(anchor(line.lstrip("#")))
    return found
