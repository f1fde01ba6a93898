"""Where the reporter's DetectionRuleConfig comes from: ``staleAfter``, the hard-constraint limits
written into violations, and the warn thresholds that scale the epsilon.

A file (``--rule-config``, re-read when it changes), the ``default`` object in the API (re-read
every ``refresh`` seconds), or the built-in defaults. A config that does not load keeps the last
good one in force, as rulegen does.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from kubernetes_asyncio import client

from rulegen.model import (
    API_GROUP,
    API_VERSION,
    DEFAULT_NAME,
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
        refresh: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._api = client.CustomObjectsApi(api_client) if api_client is not None else None
        self.refresh = refresh
        self.clock = clock
        self.config = DetectionRuleConfig.default()
        self._stamp: tuple[int, int] | None = None
        self._next = 0.0

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
        elif self._api is not None and self.clock() >= self._next:
            self._next = self.clock() + self.refresh
            await self._reload_api()
        return self.config

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

    async def _reload_api(self) -> None:
        assert self._api is not None
        try:
            obj = await self._api.get_cluster_custom_object(
                API_GROUP, API_VERSION, PLURAL, DEFAULT_NAME
            )
        except client.ApiException as exc:
            if exc.status == 404:
                if self.config != DetectionRuleConfig.default():
                    log.info("no DetectionRuleConfig/default; using the built-in defaults")
                self.config = DetectionRuleConfig.default()
            else:
                log.warning("cannot read DetectionRuleConfig", extra={"status": exc.status})
            return
        except Exception as exc:  # connection trouble: keep the last one
            log.warning("cannot read DetectionRuleConfig", extra={"err": str(exc)})
            return
        try:
            config = config_from_object(obj)
        except ConfigError as exc:
            log.error(
                "DetectionRuleConfig rejected; keeping the last good one", extra={"err": str(exc)}
            )
            return
        if config != self.config:
            log.info("rule config loaded from the API", extra={"hash": config.config_hash()})
        self.config = config
