"""YAML for DetectionRuleConfig files: safe, without aliases, bounded in size.

A nine-level alias bomb is a few hundred bytes that expand to 9**9 list items when anything
walks or prints it (30 s and 1.6 GB in the model's error path). A DetectionRuleConfig never
needs an alias, so the loader refuses alias nodes outright rather than bounding expansion.
Integers too long to convert, and files larger than any config, are refused the same way.
"""

from __future__ import annotations

from typing import Any, Final

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError

MAX_BYTES: Final = 1 << 20  # a full DetectionRuleConfig is about 2 KiB
MAX_INT_CHARS: Final = 1000  # longer integer literals are refused before conversion


class NoAliasLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses aliases (``*name``) and over-long integers."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise ComposerError(
                None,
                None,
                f"YAML aliases (*{event.anchor}) are not allowed in a DetectionRuleConfig",
                event.start_mark,
            )
        return super().compose_node(parent, index)

    def construct_yaml_int(self, node: Any) -> Any:
        if len(node.value) > MAX_INT_CHARS:
            raise ConstructorError(
                None,
                None,
                f"integer of {len(node.value)} characters (at most {MAX_INT_CHARS})",
                node.start_mark,
            )
        return super().construct_yaml_int(node)


NoAliasLoader.add_constructor("tag:yaml.org,2002:int", NoAliasLoader.construct_yaml_int)


class InvalidYAML(yaml.YAMLError):
    """Why a text is refused, in one line (PyYAML's own messages quote the source over lines)."""


def _one_line(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        context = f"{exc.context} " if exc.context else ""
        mark = exc.problem_mark
        return f"{context}{exc.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split())


def load_documents(text: str) -> list[Any]:
    """The non-empty documents of ``text``; InvalidYAML for aliases, bad YAML, huge input."""
    if len(text) > MAX_BYTES:
        raise InvalidYAML(
            f"{len(text)} characters or more; a DetectionRuleConfig is at most {MAX_BYTES}"
        )
    try:
        return [d for d in yaml.load_all(text, Loader=NoAliasLoader) if d is not None]
    except yaml.YAMLError as exc:
        raise InvalidYAML(_one_line(exc)) from exc
