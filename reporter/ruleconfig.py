"""Where the reporter's DetectionRuleConfig comes from: ``staleAfter``, the hard-constraint limits
written into violations, and the warn thresholds that scale the epsilon.

A file (``--rule-config``, re-read when it changes), the ``default`` object in the API (listed,
then watched with ``mco.watch``: an edit is in force at the next cycle, and nothing is asked of
the API server in between), or the built-in defaults. A config that does not load keeps the last
good one in force, as rulegen does.
"""

from __future__ import annotations

import asyncio
import logging
import os

import msgspec
from kubernetes_asyncio import client

from mco.apierrors import classify
from mco.watch import ListWatch, Resource, WatchSettings, object_meta
from rulegen.model import (
    API_GROUP,
    API_VERSION,
    DEFAULT_NAME,
    KIND,
    PLURAL,
    ConfigError,
    DetectionRuleConfig,
    config_from_object,
    load_config,
)

log = logging.getLogger("mco.reporter.ruleconfig")


class RuleConfigSource:
    def __init__(
        self,
        *,
        path: str | None = None,
        api_client: client.ApiClient | None = None,
        watch: WatchSettings | None = None,
    ) -> None:
        self.path = path
        self.config = DetectionRuleConfig.default()
        # metadata.generation of the API object whose config is in force; None for a file or
        # the built-in defaults. Moves only with an accepted object (a rejected one changes
        # nothing), so the report's status.config never carries a rejected generation.
        self.generation: int | None = None
        # The API's object is present but was rejected before any was accepted: the config in
        # force is the built-in defaults, which must not be passed off to readers as accepted
        # (the report's status.config keeps what an earlier reporter wrote).
        self.unaccepted = False
        self._accepted = False  # an object of the API was accepted (and not deleted since)
        self._stamp: tuple[int, int] | None = None
        # Set once the first read of the API's object ended (found, absent, or failed: the
        # config in force then stays); at once for a file or the built-in defaults.
        self.synced = asyncio.Event()
        self._watch: ListWatch | None = None
        if api_client is not None and path is None:
            resource = Resource(
                API_GROUP, API_VERSION, PLURAL, field_selector=f"metadata.name={DEFAULT_NAME}"
            )
            self._watch = ListWatch(
                api_client, resource, self, watch, on_restart=lambda *_: self.synced.set()
            )
        else:
            self.synced.set()

    def load_initial(self) -> DetectionRuleConfig:
        """The file's config, or ConfigError (a bad file at start-up is a flag error)."""
        if self.path is not None:
            st = os.stat(self.path)
            self.config = load_config(self.path)
            self._stamp = (st.st_mtime_ns, st.st_size)
        return self.config

    async def current(self) -> DetectionRuleConfig:
        """The config to use now; cheap to call every cycle."""
        if self.path is not None:
            self._reload_file()
        return self.config

    async def follow(self) -> None:
        """Keep ``config`` in line with the API's object until cancelled (returns at once for a
        file or the built-in defaults)."""
        if self._watch is not None:
            await self._watch.run()

    async def refresh(self) -> None:
        """One read of the API's object (``--once``); a failure keeps the config in force."""
        if self._watch is None:
            return
        try:
            await self._watch.list_once()
        except Exception as exc:
            self.synced.set()
            error = classify(exc)
            if error is None:
                raise
            log.warning(
                "cannot read DetectionRuleConfig",
                extra={"kind": error.kind, "status": error.status, "err": error.message},
            )

    # -- the watch's handler (mco.watch.Handler) -------------------------------------------------

    async def listed(self, items: list[msgspec.Raw]) -> None:
        found = [raw for raw in items if object_meta(raw).name == DEFAULT_NAME]
        if found:
            self._take(found[0])
        else:
            self._absent()
        self.synced.set()

    async def changed(self, kind: str, obj: msgspec.Raw) -> None:
        if object_meta(obj).name != DEFAULT_NAME:
            return  # an API server that ignores the field selector
        if kind == "DELETED":
            self._absent()
        else:
            self._take(obj)

    def _absent(self) -> None:
        if self.config != DetectionRuleConfig.default():
            log.info("no DetectionRuleConfig/default; using the built-in defaults")
        self.config = DetectionRuleConfig.default()
        self.generation = None
        self.unaccepted = self._accepted = False

    def _take(self, raw: msgspec.Raw) -> None:
        try:
            obj = msgspec.json.decode(raw)
            if not isinstance(obj, dict):
                raise ConfigError(["the object is not a mapping"])
            # A list's items carry no apiVersion and kind.
            config = config_from_object(
                {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": KIND, **obj}
            )
        except (ConfigError, msgspec.DecodeError) as exc:
            log.error(
                "DetectionRuleConfig rejected; keeping the last good one", extra={"err": str(exc)}
            )
            self.unaccepted = not self._accepted
            return
        self.unaccepted = False
        self._accepted = True
        if config != self.config:
            log.info("rule config loaded from the API", extra={"hash": config.config_hash()})
        self.config = config
        meta = obj.get("metadata")
        generation = meta.get("generation") if isinstance(meta, dict) else None
        self.generation = generation if isinstance(generation, int) else None

    def _reload_file(self) -> None:
        assert self.path is not None
        try:
            st = os.stat(self.path)
        except OSError as exc:
            log.warning("rule config unreadable; keeping the last one", extra={"err": str(exc)})
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            self.config = load_config(self.path)
            log.info(
                "rule config loaded", extra={"path": self.path, "hash": self.config.config_hash()}
            )
        except ConfigError as exc:
            log.error("rule config rejected; keeping the last good one", extra={"err": str(exc)})
