"""A ``ray_tt_ext.Tuner``'s shared executor hosts, started and ended by the driver.

Runs in the driver (or, under Ray Client, the Tuner actor): :class:`ExecutorHosts`
starts the fit's first host; the trials find it by :func:`hosts_name` of the
experiment (see :mod:`ray_tt_ext._executor`).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Iterator
from typing import Any

import ray

from ray_tt_ext._executor_host import HostActor, host_options


def hosts_name(experiment_path: str) -> str:
    """The name of the shared executor hosts of the experiment at ``experiment_path``.

    The Tuner's driver and its trials both know the experiment's folder
    (``StorageContext.experiment_fs_path``); the trainable's registered class
    is no key (Tune registers it by name, and a second Tuner of the same
    trainer class in the same job replaces it).
    """
    digest = hashlib.sha1(experiment_path.encode()).hexdigest()[:20]
    return f"ray_tt_ext_executor_hosts_{digest}"


class ExecutorHosts:
    """The shared executor hosts of one fit (driver, or the Ray Client Tuner actor).

    :meth:`running` starts the first host on this node, named
    :func:`hosts_name` of the experiment, for the length of a fit, and kills it
    at the end: the hosts it started on other nodes, and every worker any of
    them owns, go with it. Nothing outlives the fit.
    """

    def __init__(self, experiment_path: str) -> None:
        self.name = hosts_name(experiment_path)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        registry = self._start()
        try:
            yield
        finally:
            ray.kill(registry, no_restart=True)

    def _start(self) -> Any:
        options = host_options(ray.get_runtime_context().get_node_id())
        deadline = time.monotonic() + 10.0
        while True:  # a previous fit's host may still be releasing the name
            try:
                return HostActor.options(name=self.name, **options).remote(registry=True)
            except ValueError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
