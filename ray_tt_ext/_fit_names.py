"""One Tune registry name per running fit of a Ray job (driver).

Tune registers a fit's trainable in the Ray job's registry under its name (a
trainer's class name, a function's name) and builds each trial's actor from
whatever is registered under that name when the trial starts. Two fits running
at once in one Ray job (two Tuners in two threads, also under Ray Client)
whose trainables share a name share one entry: the first fit's later trials
run the second fit's trainable (its trainer, its config). Here each running
fit holds its name (in this process, and in the job's key-value store); a
fit whose name another running fit holds registers its trainable as
``<name>_2`` (``_3``, ...), which its trials' names show, and its
``tuner.pkl`` remembers it, so that ``Tuner.restore`` registers the trainable
under the name its trials were saved with.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any, Optional

from ray_tt_ext import _compat

logger = logging.getLogger("ray_tt_ext")

_LOCK = threading.Lock()
#: The registry names the running fits of this process hold.
_HELD: set[str] = set()
_KEY = "fit_names/{}"


class RegistryNameInUseError(RuntimeError):
    """A restored experiment's registry name is held by a fit still running."""


def registry_name(trainable: Any) -> str:
    """The name Tune registers ``trainable`` under."""
    return _compat.Experiment.get_trainable_name(trainable)


def renamed(trainable: Any, name: str) -> Any:
    """``trainable`` registered as ``name``: a subclass of a class trainable
    with ``_name`` set; for a function, Tune's own wrapping of it, so named."""
    if isinstance(trainable, type):
        return type(
            trainable.__name__,
            (trainable,),
            {
                "_name": name,
                "__module__": trainable.__module__,
                "__doc__": trainable.__doc__,
            },
        )
    return _compat.wrap_function(trainable, name=name)


def _claim(name: str) -> Optional[bool]:
    """Hold ``name`` if no fit of this job holds it (call under ``_LOCK``):
    ``None`` if another does, else whether the job's key-value store has the
    claim (other processes of the job: Ray Client Tuner actors)."""
    if name in _HELD:
        return None
    in_store = _compat.claim_job_key(_KEY.format(name))
    if in_store is False:
        return None
    _HELD.add(name)
    return bool(in_store)


@contextlib.contextmanager
def fit_name(trainable: Any, saved: Optional[str] = None) -> Iterator[str]:
    """Hold, for the length of a fit, a registry name no other running fit of
    this Ray job holds (in this process or, under Ray Client, in another
    Tuner actor).

    The trainable's own name if it is free, else the first free ``name_N``
    (N = 2, 3, ...); ``saved`` (a restored fit's: its trials keep the name they
    were saved with) is taken as it is, or refused with
    :class:`RegistryNameInUseError` while another fit holds it. Runs on the
    driver (or the Ray Client Tuner actor).
    """
    base = registry_name(trainable)
    with _LOCK:
        if saved is not None:
            name, in_store = saved, _claim(saved)
            if in_store is None:
                raise RegistryNameInUseError(
                    f"The restored experiment's trials are registered as {saved!r}, "
                    "a name another Tuner of this Ray job holds while it fits: Tune "
                    "keeps one trainable per name, so its trials would run the other "
                    "Tuner's trainable. Fix: call fit() on the restored Tuner once "
                    "the other Tuner's fit() has returned."
                )
        else:
            name, n = base, 1
            while (in_store := _claim(name)) is None:
                n += 1
                name = f"{base}_{n}"
    try:
        yield name
    finally:
        with _LOCK:
            _HELD.discard(name)
            if in_store:
                try:
                    _compat.release_job_key(_KEY.format(name))
                except Exception:  # never hide the fit's own outcome
                    logger.warning("Could not release the registry name %r", name)
