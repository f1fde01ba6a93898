"""The dashboards type-checked against Grafana's own schema, the npm package ``@grafana/schema``,
by TypeScript's ``tsc``: Grafana cannot be installed here, its types can.

``tests/dashboards/schema/package.json`` pins one ``@grafana/schema`` per Grafana version the
dashboards target, under npm aliases (``grafana-schema-<version>``), and ``typescript``. They are
installed once into ``.cache/grafana-schema/<hash of the lock file>`` and reused.

Each dashboard becomes a ``.ts`` file assigning its JSON to the schema's ``Dashboard`` type, with
every panel narrowed by its ``type`` to the plugin's own ``Options`` and ``FieldConfig`` (Grafana's
``panelcfg`` types), so ``options`` and ``fieldConfig.defaults.custom`` are checked as exactly as
the top level. One ``tsc`` run per version checks every file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "tests" / "dashboards" / "schema"
CACHE = ROOT / ".cache" / "grafana-schema"
ALIAS = "grafana-schema-"

# Panel type -> the name of its panelcfg module, and whether that module has a FieldConfig
# (a ``custom`` block); the same in every pinned version.
PANELS: dict[str, tuple[str, bool]] = {
    "timeseries": ("TimeSeries", True),
    "stat": ("Stat", False),
    "table": ("Table", True),
    "bargauge": ("BarGauge", False),
}

# npm's words for "the registry cannot be reached" (DNS, refused, timed out, unreachable).
_OFFLINE = re.compile(
    r"\b(ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH)\b"
)
_DIAGNOSTIC = re.compile(
    r"^(?P<file>[^(\s][^(]*)\((?P<line>\d+),(?P<col>\d+)\): error (?P<rest>.*)$"
)


class RegistryUnreachable(Exception):
    """npm could not reach its registry to install the pinned packages."""


@dataclass(frozen=True)
class Diagnostic:
    file: str  # the checked file's stem: the dashboard's name
    line: int
    text: str  # the source line it points at
    message: str  # tsc's message, continuation lines included


def versions() -> list[str]:
    """The Grafana versions pinned in the npm project (``grafana-schema-<version>`` aliases)."""
    deps = json.loads((PROJECT / "package.json").read_text())["dependencies"]
    return sorted(
        (name.removeprefix(ALIAS) for name in deps if name.startswith(ALIAS)),
        key=lambda v: tuple(int(p) for p in v.split(".")),
    )


def exact_version(node_modules: Path, version: str) -> str:
    """The ``@grafana/schema`` release installed for ``version``."""
    return str(
        json.loads((node_modules / f"{ALIAS}{version}" / "package.json").read_text())["version"]
    )


def install() -> Path:
    """The npm project's ``node_modules``, installed with ``npm ci`` on first use and kept, keyed
    by the hash of ``package.json`` and its lock (a change installs afresh and drops the old
    install). Raises :class:`RegistryUnreachable` where npm cannot reach its registry."""
    lock = (PROJECT / "package-lock.json").read_bytes()
    key = hashlib.sha256((PROJECT / "package.json").read_bytes() + lock).hexdigest()[:16]
    target = CACHE / key
    if (target / ".complete").exists():
        return target / "node_modules"
    npm = shutil.which("npm")
    if npm is None:
        raise FileNotFoundError(
            "npm is not installed: scripts/setup-system.sh (make venv) installs it"
        )
    CACHE.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=CACHE))
    try:
        for name in ("package.json", "package-lock.json"):
            shutil.copy(PROJECT / name, staging / name)
        result = subprocess.run(
            [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
            cwd=staging,
            # One retry, not npm's two with up to a minute between: offline, skip soon.
            env={"npm_config_fetch_retries": "1", **os.environ},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if result.returncode != 0:
            output = result.stdout[-3000:] + result.stderr[-3000:]
            if _OFFLINE.search(output):
                raise RegistryUnreachable(f"npm cannot reach its registry: {output.strip()[-500:]}")
            raise RuntimeError(f"npm ci failed in {PROJECT}:\n{output}")
        (staging / ".complete").touch()
        with contextlib.suppress(OSError):  # another run installed it meanwhile
            staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for old in CACHE.iterdir():
        if old.name != key and not old.name.startswith("."):
            shutil.rmtree(old, ignore_errors=True)
    return target / "node_modules"


def _panelcfg(package: Path, kind: str, module: str) -> str:
    """The import of a panel plugin's types: the exact export where the package lists one
    (12 and later), else the file's own path, which TypeScript finds from its ``.js``."""
    path = f"./dist/esm/raw/composable/{kind}/panelcfg/x/{module}PanelCfg_types.gen"
    exports = json.loads((package / "package.json").read_text()).get("exports", {})
    return "@grafana/schema" + path[1:] + ("" if path in exports else ".js")


def _prelude(package: Path, version: str) -> str:
    """``schema.ts``: the schema's dashboard with each panel typed by its plugin's own types."""
    imports = [
        "import type { DataQuery, Dashboard, FieldConfig, FieldConfigSource, Panel, RowPanel,"
        " VariableModel }"
        ' from "@grafana/schema";'
    ]
    union = []
    for kind, (module, has_field_config) in PANELS.items():
        imports.append(f'import type * as {kind} from "{_panelcfg(package, kind, module)}";')
        custom = f"{kind}.FieldConfig" if has_field_config else "never"
        union.append(f'  | Typed<"{kind}", {kind}.Options, {custom}>')
    return "\n".join(
        [
            f"// Grafana {version}: generated by tests/dashboards/grafana_schema.py",
            *imports,
            "",
            "// What JSON can hold of a schema type: a string enum's values, not its members (JSON",
            "// cannot name an enum member; Grafana reads the value).",
            "export type Json<T> = T extends string",
            "  ? `${T}`",
            "  : T extends number | boolean | null | undefined",
            "    ? T",
            "    : T extends Array<infer U>",
            "      ? Array<Json<U>>",
            "      : T extends object",
            "        ? { [K in keyof T]: Json<T[K]> }",
            "        : T;",
            "// A plugin's options as stored: Grafana fills what is missing from the plugin's",
            "// defaults, so any key may be absent; a key present must be known and well typed.",
            "type Defaulted<T> = T extends Array<infer U>",
            "  ? Array<Defaulted<U>>",
            "  : T extends object",
            "    ? { [K in keyof T]?: Defaulted<T[K]> }",
            "    : T;",
            "// fieldConfig with the plugin's own custom block, checked exactly (no extra keys).",
            "type ExactFieldConfigSource<F> = Omit<FieldConfigSource, 'defaults'> & {",
            "  defaults: Omit<FieldConfig, 'custom'> & { custom?: Defaulted<F> };",
            "};",
            "type Typed<T extends string, O, F> = Omit<",
            "  Panel, 'type' | 'options' | 'fieldConfig' | 'targets'",
            "> & {",
            "  type: T;",
            "  options?: Defaulted<O>;",
            "  fieldConfig?: ExactFieldConfigSource<F>;",
            "  // The schema leaves a query's fields to its data source; DataQuery's are checked.",
            "  targets?: Array<DataQuery & Record<string, unknown>>;",
            "};",
            "export type CheckedPanel =",
            *union,
            "  ;",
            "export type CheckedRow = Omit<RowPanel, 'panels'> & { panels: CheckedPanel[] };",
            "// Grafana writes a query variable's `definition` (the text its variables list shows)",
            "// in every dashboard it saves; the schema's VariableModel leaves it out.",
            "export type CheckedVariable = VariableModel & { definition?: string };",
            "export type CheckedDashboard = Omit<Dashboard, 'panels' | 'templating'> & {",
            "  panels?: Array<CheckedPanel | CheckedRow>;",
            "  templating?: { list?: CheckedVariable[] };",
            "};",
            "",
        ]
    )


def typecheck(
    node_modules: Path, version: str, boards: Mapping[str, Mapping[str, Any]], workdir: Path
) -> list[Diagnostic]:
    """tsc's errors for ``boards`` (name -> dashboard JSON) against Grafana ``version``."""
    unknown = {
        str(p.get("type"))
        for b in boards.values()
        for p in _all_panels(b)
        if p.get("type") not in PANELS
    } - {"row"}
    if unknown:
        raise ValueError(f"panel types without schema types in PANELS: {sorted(unknown)}")
    work = workdir / version
    (work / "node_modules" / "@grafana").mkdir(parents=True)
    # The schema's own files import "@grafana/schema": under its real name, seen through this
    # link (preserveSymlinks), every import of it resolves to this version.
    package = node_modules / f"{ALIAS}{version}"
    (work / "node_modules" / "@grafana" / "schema").symlink_to(package)
    (work / "schema.ts").write_text(_prelude(package, version))
    sources: dict[str, list[str]] = {}
    for name, board in boards.items():
        text = (
            'import type { CheckedDashboard, Json } from "./schema";\n\n'
            f"export const dashboard: Json<CheckedDashboard> = {json.dumps(board, indent=2)};\n"
        )
        (work / f"{name}.ts").write_text(text)
        sources[name] = text.splitlines()
    config = {
        "compilerOptions": {
            "module": "esnext",
            "moduleResolution": "bundler",
            "target": "es2022",
            "lib": ["es2022"],  # no DOM: the schema needs none, and it is most of tsc's time
            "preserveSymlinks": True,
            "types": [],
        },
        "files": ["schema.ts", *(f"{name}.ts" for name in boards)],
    }
    (work / "tsconfig.json").write_text(json.dumps(config, indent=2))
    result = subprocess.run(
        [
            str(node_modules / ".bin" / "tsc"),
            "--project",
            "tsconfig.json",
            "--noEmit",
            "--strict",
            "--pretty",
            "false",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    diagnostics = _parse(result.stdout, sources)
    if result.returncode != 0 and not diagnostics:
        raise RuntimeError(f"tsc failed without diagnostics:\n{result.stdout}{result.stderr}")
    return diagnostics


def _parse(output: str, sources: Mapping[str, list[str]]) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for line in output.splitlines():
        match = _DIAGNOSTIC.match(line)
        if match:
            file = Path(match["file"]).stem
            number = int(match["line"])
            lines = sources.get(file, [])
            text = lines[number - 1].strip() if 0 < number <= len(lines) else ""
            out.append(Diagnostic(file, number, text, match["rest"]))
        elif out and line.startswith(" "):
            last = out[-1]
            out[-1] = Diagnostic(last.file, last.line, last.text, f"{last.message}\n{line}")
    return out


def _all_panels(board: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [q for p in board.get("panels", []) for q in (p, *p.get("panels", []))]
