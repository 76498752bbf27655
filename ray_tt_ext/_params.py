"""A trainer's constructor arguments in the object store, put once per conversion.

Shared by the Train V1 trainers (``_trainer``) and ``ray_tt_ext.v2.Tuner``'s
V2 trainers (``v2._trial``): what Tune registers for a trainer holds a
reference, never the data, and the data lives as long as its owner (the
Tuner that converted the trainer). Runs on the driver; copies unpickled in
trial actors are plain references.
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref
from collections.abc import Iterator
from typing import Any, Optional

import ray

from ray_tt_ext import _compat

# ---------------------------------------------------------------------------
# Constructor arguments in the object store
# ---------------------------------------------------------------------------


_RELEASED_MESSAGE = (
    "The trainer's constructor arguments were released from the object store when "
    "the Tuner (or trainer) that converted it was garbage-collected. Fix: keep that "
    "Tuner while its trials run, or pass the trainer again (Tuner.restore(path, "
    "trainable=trainer) converts it anew)."
)


class ObjectStoreParams:
    """A trainer's constructor arguments, put into the object store once.

    Made on the driver by ``as_trainable()`` (:meth:`for_trainer`). It is in
    one of three states, each with its own factory:

    * *pending* (before ``ray.init()``): the arguments are held here and put by
      one post-init hook for all pending holders;
    * *in the store*: it holds the ``ObjectRef``; pickled, it is that ref only,
      so what Tune registers never carries the data (:meth:`from_ref`);
    * *missing*: pickled while pending to measure what Tune will register
      (:meth:`missing`); ``get()`` explains what went wrong.

    Lifetime: the object lives as long as its *owner*: the ``ray_tt_ext.Tuner``
    that converted the trainer (``Tuner.restore`` converts anew), or the
    trainer during its own ``fit()``, or else the holder itself. Tune pickles
    the trainable outside any Ray task (its registry, the trial actor class),
    and Ray pins every ref pickled that way for the life of the process (Ray
    also keeps the last 1,024 actor classes, hence this trainable, in a
    cache); the holder counts those pins, and once the owner is
    garbage-collected they are released through Ray's reference counting, so
    the object store gets the memory back. Copies unpickled elsewhere (trial
    actors) are plain references and never release anything.
    """

    def __init__(
        self,
        *,
        pending: Optional[dict[str, Any]] = None,
        ref: Optional[ray.ObjectRef] = None,
        missing: bool = False,
    ):
        self._pending = pending
        self._ref = ref
        self._missing = missing
        self._owner: Optional[weakref.ref] = None
        self._released = False

    @classmethod
    def for_trainer(cls, params: dict[str, Any]) -> ObjectStoreParams:
        """The holder of a trainer's arguments, put now or right after ``ray.init()``.

        Its owner is the one set by :func:`owned_by` around the conversion,
        else the holder itself.
        """
        holder = cls(pending=params)
        owner = _OWNER.get()
        holder._owner = weakref.ref(owner if owner is not None else holder)
        if ray.is_initialized():
            holder.flush()
        else:
            _flush_after_init(holder)
        return holder

    @classmethod
    def from_ref(cls, ref: ray.ObjectRef) -> ObjectStoreParams:
        """What a pickled holder becomes: the reference, not the data.

        In the process that holds the original (the driver), the original
        itself: cloudpickle sets the attributes of a class it unpickles on the
        live class object of the same id, so a copy would replace the
        original there and end its lifetime early.
        """
        original = _HOLDERS_BY_REF.get(ref.binary())
        return original if original is not None else cls(ref=ref)

    @classmethod
    def missing(cls) -> ObjectStoreParams:
        """A holder pickled while pending (only while measuring)."""
        return cls(missing=True)

    def flush(self) -> None:
        """Put pending arguments into the object store (driver)."""
        if self._ref is None and self._pending is not None:
            self._ref = ray.put(self._pending)
            self._pending = None
            _HOLDERS_BY_REF[self._ref.binary()] = self
            _compat.count_out_of_band_pins(self._ref)
            owner = self._owner() if self._owner is not None else None
            weakref.finalize(owner or self, _release, self._ref).atexit = False

    def get(self) -> dict[str, Any]:
        """The constructor arguments (coordinator actor, or driver)."""
        if self._released:
            raise RuntimeError(_RELEASED_MESSAGE)
        if self._missing:
            raise RuntimeError(
                "The trainer's constructor arguments were not in the object store "
                "when its Tune trainable was pickled (Ray was not initialized). "
                "Fix: call ray.init() before pickling the trainable yourself, or "
                "let Tuner.fit() start Ray."
            )
        if self._ref is None:
            if not ray.is_initialized():
                return dict(self._pending or {})
            self.flush()
        try:
            return ray.get(self._ref)
        except (ray.exceptions.ObjectFreedError, ray.exceptions.ObjectLostError) as e:
            raise RuntimeError(f"{_RELEASED_MESSAGE} ({type(e).__name__})") from None

    def __reduce__(self):
        return self.__reduce_for_payload__(pickling=True, registered=False)

    def __reduce_for_payload__(self, *, pickling: bool, registered: bool):
        """How the holder pickles: the ref, or (Ray not started yet) the arguments.

        The payload inspector's hook (``_payload.REDUCE_HOOK``): with
        ``registered`` (the guard measuring what Tune will register) pending
        arguments count as the reference they become, not as their data; with
        ``pickling`` False (the inspector only walking the graph) no pin is
        counted, since nothing is serialized. Runs on the driver.
        """
        if self._released:
            raise RuntimeError(_RELEASED_MESSAGE)
        if self._ref is None and not self._missing and ray.is_initialized():
            self.flush()
        if self._ref is not None:
            if pickling:
                _compat.note_ref_pickled(self._ref)
            return (_params_from_ref, (self._ref,))
        if self._missing or registered:
            # What Tune registers once Ray runs: a reference, not the data.
            return (_params_missing, ())
        return (_params_pending, (self._pending,))


def _release(ref: ray.ObjectRef) -> None:
    """The owner is gone: drop the holder's ref and Ray's pins on it (driver).

    The holder itself may live on (Ray caches actor classes); it no longer
    refers to the object, so Ray's reference counting frees it.
    """
    holder = _HOLDERS_BY_REF.pop(ref.binary(), None)
    if holder is not None:
        holder._ref, holder._released = None, True
    _compat.release_out_of_band_pins(ref)


# Module-level functions, so a pickled holder names them by reference.
def _params_from_ref(ref: ray.ObjectRef) -> ObjectStoreParams:
    return ObjectStoreParams.from_ref(ref)


def _params_missing() -> ObjectStoreParams:
    return ObjectStoreParams.missing()


def _params_pending(pending: dict[str, Any]) -> ObjectStoreParams:
    return ObjectStoreParams(pending=pending)


# The holders that put their arguments in this process, by ref.
_HOLDERS_BY_REF: weakref.WeakValueDictionary[bytes, ObjectStoreParams] = (
    weakref.WeakValueDictionary()
)
# Holders waiting for ray.init(), flushed by one post-init hook per process.
_PENDING_HOLDERS: weakref.WeakSet[ObjectStoreParams] = weakref.WeakSet()
_flush_hook_installed = False


def _flush_pending_holders() -> None:
    """Put every pending holder's arguments; runs right after ``ray.init()`` (driver)."""
    for holder in list(_PENDING_HOLDERS):
        holder.flush()
    _PENDING_HOLDERS.clear()


def _flush_after_init(holder: ObjectStoreParams) -> None:
    global _flush_hook_installed
    _PENDING_HOLDERS.add(holder)
    if not _flush_hook_installed:
        _compat.add_post_init_hook(_flush_pending_holders)
        _flush_hook_installed = True


_OWNER: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "ray_tt_ext_params_owner", default=None
)


@contextlib.contextmanager
def owned_by(owner: Any) -> Iterator[None]:
    """Arguments put in this context (thread) live while ``owner`` lives (driver)."""
    token = _OWNER.set(owner)
    try:
        yield
    finally:
        _OWNER.reset(token)
