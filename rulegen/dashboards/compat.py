"""The SDK's dashboard JSON, trimmed to what every Grafana the dashboards target reads alike.

The SDK writes the model of one Grafana version, with every default spelled out. Some of those
keys are unknown to other versions' schemas (``tests/dashboards/test_schema.py`` checks each
pinned ``@grafana/schema``, Grafana 11.0 to 13.2), and one is read differently. Left out at
their default value, every version fills in the same default. A key set to anything else is
kept, and the schema check then names the versions that do not know it.
"""

from __future__ import annotations

from typing import Any, Final

# Options per panel type, at the panel plugin's default.
PANEL_OPTION_DEFAULTS: Final[dict[str, dict[str, Any]]] = {
    # Not in Grafana 11.0's stat.
    "stat": {"percentChangeColorMode": "standard"},
    # Not in 11.0's bar gauge; hidden by default where it exists.
    "bargauge": {
        "legend": {"calcs": [], "displayMode": "list", "placement": "bottom", "showLegend": False}
    },
    # The 11.x table footer; gone from the table's options in 12.
    "table": {"footer": {"countRows": False, "reducer": [], "show": False}},
}
# Variable keys at their default: allowCustomValue is not in 11.0; auto, auto_count and
# auto_min belong to interval variables and are in no version's schema.
VARIABLE_DEFAULTS: Final[dict[str, Any]] = {
    "allowCustomValue": True,
    "auto": False,
    "auto_count": 30,
    "auto_min": "10s",
}


def portable(board: dict[str, Any]) -> None:
    """Trim ``board`` (the SDK's encoded JSON) in place."""
    for link in board.get("links", []):
        # The SDK always writes `placement: inControlsMenu` (grafana-foundation-sdk#1272). Grafana
        # 12 draws a `dashboards` link placed there nowhere (grafana#115084), and 11 has no
        # controls menu: without `placement`, every version draws it above the panels.
        link.pop("placement", None)
    for panel in board.get("panels", []):
        _drop_defaults(panel.get("options", {}), PANEL_OPTION_DEFAULTS.get(panel["type"], {}))
    for variable in board.get("templating", {}).get("list", []):
        _drop_defaults(variable, VARIABLE_DEFAULTS)


def _drop_defaults(holder: dict[str, Any], defaults: dict[str, Any]) -> None:
    for key, default in defaults.items():
        if key in holder and holder[key] == default:
            del holder[key]
