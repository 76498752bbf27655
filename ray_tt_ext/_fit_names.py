"""One Tune registry name per running fit in this process (driver).

Tune registers a fit's trainable in a process-wide registry under its name (a
trainer's class name, a function's name) and builds each trial's actor from
whatever is registered under that name when the trial starts. Two fits running
at once in one process (two Tuners in two threads) whose trainables share a
name share one entry: the first fit's later trials run the second fit's
trainable (its trainer, its config). Here each running fit holds its name; a
fit whose name another running fit holds registers its trainable as
``<name>_2`` (``_3``, ...), which its trials' names show, and its
``tuner.pkl`` remembers it, so that ``Tuner.restore`` registers the trainable
under the name its trials were saved with.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any, Optional

from ray_tt_ext import _compat

_LOCK = threading.Lock()
#: The registry names the running fits of this process hold.
_HELD: set[str] = set()


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


@contextlib.contextmanager
def fit_name(trainable: Any, saved: Optional[str] = None) -> Iterator[str]:
    """Hold, for the length of a fit, a registry name no other running fit holds.

    The trainable's own name if it is free, else the first free ``name_N``
    (N = 2, 3, ...); ``saved`` (a restored fit's: its trials keep the name they
    were saved with) is taken as it is, or refused
    with :class:`RegistryNameInUseError` while another fit holds it. Runs on
    the driver (or the Ray Client Tuner actor).
    """
    base = registry_name(trainable)
    with _LOCK:
        if saved is not None:
            if saved in _HELD:
                raise RegistryNameInUseError(
                    f"The restored experiment's trials are registered as {saved!r}, "
                    "a name another Tuner in this process holds while it fits: Tune "
                    "keeps one trainable per name, so its trials would run the other "
                    "Tuner's trainable. Fix: call fit() on the restored Tuner once "
                    "the other Tuner's fit() has returned."
                )
            name = saved
        else:
            name, n = base, 1
            while name in _HELD:
                n += 1
                name = f"{base}_{n}"
        _HELD.add(name)
    try:
        yield name
    finally:
        with _LOCK:
            _HELD.discard(name)
