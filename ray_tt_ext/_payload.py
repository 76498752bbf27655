"""Payload inspector and guard: what would Tune register for a trainable?

Tune registers a trainable (a function or a class) in the GCS key-value store
and Ray exports the trial actor class the same way; both go through one gRPC
message. :func:`inspect_payload` measures what ``ray.cloudpickle.dumps`` would
produce and names the parts that make it large, without copying large buffers:
a counting pass writes to a sink that only adds up lengths, and pickle protocol
5 hands contiguous buffers (numpy arrays and the like) to a callback out of
band, so a 1 GiB array costs a length lookup, not a 1 GiB copy.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import pickle
import types
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass, field
from typing import Any, Optional

from ray_tt_ext import _compat
from ray_tt_ext._compat import TuneError

logger = logging.getLogger("ray_tt_ext")

#: The gRPC message limit in force for the installed Ray (honours
#: ``RAY_max_grpc_message_size``). A registered payload over it cannot be sent.
GRPC_MAX_MESSAGE_BYTES: int = _compat.grpc_max_message_bytes()

#: Environment variable that overrides the guard's default limit (bytes).
PAYLOAD_LIMIT_ENV_VAR = "RAY_TT_EXT_PAYLOAD_LIMIT"

_PROTOCOL = 5
# Extra bytes an in-band buffer costs over an out-of-band one: the BYTEARRAY8
# or BINBYTES8 opcode with its 8-byte length, instead of NEXT_BUFFER.
_IN_BAND_HEADER = 8

#: The hook the measuring pickler consults: an object whose class defines
#: ``__reduce_for_payload__(self, *, pickling: bool, registered: bool)`` is
#: measured by what it returns instead of its ``__reduce__``. ``pickling`` says
#: whether the result is pickled now (False while the inspector only walks the
#: graph), ``registered`` whether it is measured as Tune will register it once
#: Ray runs (:func:`check_registered_payload`). Its own ``__reduce__`` should be
#: the hook with ``pickling=True, registered=False``.
REDUCE_HOOK = "__reduce_for_payload__"

# (predicate, view): ``inspect_payload(obj)`` measures ``view(obj)`` for the first
# predicate that holds; see :func:`register_payload_view`.
_VIEWS: list[tuple[Callable[[Any], bool], Callable[[Any], Any]]] = []


def register_payload_view(
    predicate: Callable[[Any], bool], view: Callable[[Any], Any]
) -> None:
    """Measure objects for which ``predicate(obj)`` holds as ``view(obj)``.

    For objects that never travel themselves, only parts of them (a Train V2
    trainer sends its training function and ``train_loop_config``); the module
    that knows the kind registers it, so the inspector knows nothing of kinds.
    """
    _VIEWS.append((predicate, view))


def _viewed(obj: Any) -> Any:
    for predicate, view in _VIEWS:
        if predicate(obj):
            return view(obj)
    return obj


def _payload_reduce(obj: Any, *, pickling: bool, registered: bool) -> Any:
    """``obj``'s own reduction for the payload hook, or ``None`` if it has none."""
    hook = getattr(type(obj), REDUCE_HOOK, None)
    if hook is None:
        return None
    return hook(obj, pickling=pickling, registered=registered)


# ---------------------------------------------------------------------------
# Counting
# ---------------------------------------------------------------------------


class _CountingSink:
    """A file object that keeps only the number of bytes written to it."""

    __slots__ = ("nbytes",)

    def __init__(self) -> None:
        self.nbytes = 0

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        self.nbytes += n
        return n


class _MeasuringPickler(_compat.ray_cloudpickle.CloudPickler):
    """``ray.cloudpickle``'s pickler that consults :data:`REDUCE_HOOK`."""

    def __init__(self, *args: Any, registered: bool, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._registered = registered

    def reducer_override(self, obj: Any) -> Any:
        reduced = _payload_reduce(obj, pickling=True, registered=self._registered)
        return super().reducer_override(obj) if reduced is None else reduced


class _ExcludingPickler(_MeasuringPickler):
    """Pickles objects listed in ``exclude`` as a tiny reference instead.

    Used to size one part of an object graph without counting the parts
    already attributed elsewhere (ancestors reached through a cycle, shared
    objects pickled once by the first path that reaches them).
    """

    def __init__(self, *args: Any, exclude: Container[int], target: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._exclude = exclude
        self._target = target

    def persistent_id(self, obj: Any) -> Optional[int]:
        if obj is not self._target and id(obj) in self._exclude:
            return 0
        return None


def _pickled_size(
    obj: Any, exclude: Optional[Container[int]] = None, registered: bool = False
) -> int:
    """``len(ray.cloudpickle.dumps(obj))`` to within a few bytes per buffer.

    With ``exclude``, objects whose ``id`` is in it count as a few bytes. With
    ``registered``, objects with the :data:`REDUCE_HOOK` count as Tune will
    register them.
    """
    sink = _CountingSink()
    out_of_band: list[int] = []

    def on_buffer(buf: Any) -> None:
        out_of_band.append(buf.raw().nbytes)
        return None  # falsy: keep it out of band, nothing is copied

    if exclude:
        pickler: _MeasuringPickler = _ExcludingPickler(
            sink,
            protocol=_PROTOCOL,
            buffer_callback=on_buffer,
            registered=registered,
            exclude=exclude,
            target=obj,
        )
    else:
        pickler = _MeasuringPickler(
            sink, protocol=_PROTOCOL, buffer_callback=on_buffer, registered=registered
        )
    pickler.dump(obj)
    return sink.nbytes + sum(n + _IN_BAND_HEADER for n in out_of_band)


def pickled_size(obj: Any) -> int:
    """``len(ray.cloudpickle.dumps(obj))`` to within a few bytes per buffer,
    without copying large buffers (numpy arrays, tensors): they are counted,
    not written. Raises what pickling raises."""
    return _pickled_size(obj)


# PROTO, FRAME and STOP opcodes: what a part costs alone but not inside a whole.
_STANDALONE_OVERHEAD = _pickled_size(None) - 1


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------


def format_bytes(n: float) -> str:
    """``1536`` -> ``'1.5 KiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Contributor:
    """One part of a payload: where it is reached, what it is, what it costs."""

    path: str
    type_name: str
    nbytes: int


@dataclass(frozen=True)
class PayloadReport:
    """What ``ray.cloudpickle.dumps(obj)`` would produce, and why.

    ``total_bytes`` is the size of the pickle; ``contributors`` lists the
    parts that account for it, largest first. Each contributor's bytes are
    its own: a container's bytes exclude the large parts listed separately.
    """

    root: str
    total_bytes: int
    contributors: tuple[Contributor, ...] = field(default_factory=tuple)

    def top(self, n: int = 5) -> tuple[Contributor, ...]:
        return self.contributors[:n]

    def format(self, top: int = 10) -> str:
        """A table of the largest contributors, sizes in human units."""
        rows = [(c.path, c.type_name, format_bytes(c.nbytes)) for c in self.top(top)]
        header = ("path", "type", "size")
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
        lines = [
            f"{self.root}: {format_bytes(self.total_bytes)} "
            f"({self.total_bytes} bytes) when pickled",
            "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)),
            "  ".join("-" * w for w in widths),
        ]
        lines += [
            f"{r[0].ljust(widths[0])}  {r[1].ljust(widths[1])}  {r[2].rjust(widths[2])}"
            for r in rows
        ]
        if len(self.contributors) > top:
            lines.append(f"... {len(self.contributors) - top} more")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {
            "root": self.root,
            "total_bytes": self.total_bytes,
            "contributors": [
                {"path": c.path, "type": c.type_name, "bytes": c.nbytes}
                for c in self.contributors
            ],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        return self.format()


# ---------------------------------------------------------------------------
# Walking the object graph the way cloudpickle does
# ---------------------------------------------------------------------------

_LEAF_TYPES = (
    bytes,
    bytearray,
    str,
    int,
    float,
    complex,
    bool,
    type(None),
    memoryview,
    types.ModuleType,
    types.CodeType,
    types.BuiltinFunctionType,
)
_MAX_DEPTH = 64
_MAX_NODES = 20_000


def _type_name(obj: Any) -> str:
    t = type(obj)
    return (
        t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
    )


def _key_label(key: Any) -> str:
    return f"[{key!r}]"


def _code_global_names(code: types.CodeType) -> set:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_global_names(const)
    return names


def _function_children(fn: types.FunctionType) -> Iterator[tuple[str, Any]]:
    if _compat.should_pickle_by_reference(fn):
        return
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__, strict=True):
            try:
                value = cell.cell_contents
            except ValueError:  # empty cell
                continue
            yield f".<closure>.{name}", value
    for name in sorted(_code_global_names(fn.__code__)):
        if name in fn.__globals__:
            yield f".<globals>.{name}", fn.__globals__[name]
    for i, value in enumerate(fn.__defaults__ or ()):
        yield f".<defaults>[{i}]", value
    for name, value in (fn.__kwdefaults__ or {}).items():
        yield f".<kwdefaults>.{name}", value
    for name, value in fn.__dict__.items():
        yield f".{name}", value


_SKIP_CLASS_ATTRS = {"__dict__", "__weakref__", "__module__", "__doc__", "__qualname__"}


def _class_children(cls: type) -> Iterator[tuple[str, Any]]:
    if _compat.should_pickle_by_reference(cls):
        return
    for name, value in list(vars(cls).items()):
        if name in _SKIP_CLASS_ATTRS:
            continue
        if isinstance(value, (classmethod, staticmethod)):
            value = value.__func__
        yield f".{name}", value
    for i, base in enumerate(cls.__bases__):
        yield f".<bases>[{i}]", base


def _reduce_children(obj: Any, registered: bool) -> Iterator[tuple[str, Any]]:
    try:
        reduced = _payload_reduce(obj, pickling=False, registered=registered)
        if reduced is None:
            reduced = obj.__reduce_ex__(_PROTOCOL)
    except Exception:
        return
    if not isinstance(reduced, tuple):
        return
    args = reduced[1] if len(reduced) > 1 else ()
    state = reduced[2] if len(reduced) > 2 else None
    for i, arg in enumerate(args or ()):
        if isinstance(arg, type) and arg is type(obj):
            continue
        yield f".<args>[{i}]", arg
    slotstate = None
    if isinstance(state, tuple) and len(state) == 2:
        state, slotstate = state
    for part in (state, slotstate):
        if isinstance(part, dict):
            for name, value in part.items():
                label = f".{name}" if isinstance(name, str) else _key_label(name)
                yield label, value
        elif part is not None:
            yield ".<state>", part
    if len(reduced) > 3 and reduced[3] is not None and not isinstance(obj, list):
        for i, value in enumerate(reduced[3]):
            yield f"[{i}]", value
    if len(reduced) > 4 and reduced[4] is not None and not isinstance(obj, dict):
        for key, value in reduced[4]:
            yield _key_label(key), value


def _children(obj: Any, registered: bool = False) -> Iterator[tuple[str, Any]]:
    if isinstance(obj, _LEAF_TYPES) or type(obj).__module__.startswith("numpy"):
        return
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield _key_label(key), value
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield f"[{i}]", value
    elif isinstance(obj, (set, frozenset)):
        for i, value in enumerate(obj):
            yield f"<item {i}>", value
    elif isinstance(obj, types.FunctionType):
        yield from _function_children(obj)
    elif isinstance(obj, types.MethodType):
        yield ".__self__", obj.__self__
        yield ".__func__", obj.__func__
    elif isinstance(obj, functools.partial):
        yield ".func", obj.func
        for i, value in enumerate(obj.args):
            yield f".args[{i}]", value
        for name, value in obj.keywords.items():
            yield f".keywords[{name!r}]", value
    elif isinstance(obj, type):
        yield from _class_children(obj)
    else:
        yield from _reduce_children(obj, registered)


def _root_name(obj: Any) -> str:
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if isinstance(name, str):
        return name
    return f"<{type(obj).__name__} object>"


def inspect_payload(
    obj: Any, *, name: Optional[str] = None, min_bytes: Optional[int] = None
) -> PayloadReport:
    """Measure what ``ray.cloudpickle.dumps(obj)`` would produce, part by part.

    Args:
        obj: Anything picklable: a trainable, a function, a trainer, a dict.
            An object of a kind registered with :func:`register_payload_view`
            is measured by its view (a Ray Train V2 trainer, once
            ``ray_tt_ext.v2`` is imported, by what its ``fit()`` sends to the
            controller: its training function and ``train_loop_config``).
        name: How to call ``obj`` at the start of each path (default: its
            ``__qualname__`` or type name).
        min_bytes: Parts smaller than this are folded into their parent
            (default: 1 KiB or 0.1% of the total, whichever is larger).

    Returns:
        A :class:`PayloadReport`. ``total_bytes`` is within a few bytes per
        large buffer of ``len(ray.cloudpickle.dumps(obj))``.

    Raises:
        Whatever pickling ``obj`` raises (e.g. ``TypeError`` for a lock).
    """
    return _inspect(obj, name=name, min_bytes=min_bytes, registered=False)


def inspect_registered(
    obj: Any, *, name: Optional[str] = None, min_bytes: Optional[int] = None
) -> PayloadReport:
    """:func:`inspect_payload` of ``obj`` as Tune will register it once Ray runs
    (objects with the :data:`REDUCE_HOOK` measured by their registered form)."""
    return _inspect(obj, name=name, min_bytes=min_bytes, registered=True)


def _inspect(
    obj: Any, *, name: Optional[str], min_bytes: Optional[int], registered: bool
) -> PayloadReport:
    """:func:`inspect_payload`; with ``registered``, as Tune will register ``obj``."""
    viewed = _viewed(obj)
    if viewed is not obj:  # measured by what travels of it
        name, obj = name or type(obj).__name__, viewed
    root = name or _root_name(obj)
    total = _pickled_size(obj, registered=registered)
    threshold = min_bytes if min_bytes is not None else max(1024, total // 1000)
    contributors: list[Contributor] = []
    # Keyed by id(), holding the object itself: parts made by ``__reduce__``
    # are temporaries, and a freed object's id is reused by the next one.
    seen: dict[int, Any] = {}
    budget = [_MAX_NODES]

    def visit(node: Any, path: str, size: int, depth: int) -> None:
        """Attribute ``size`` bytes of ``node`` to itself or its big children."""
        own = size
        if depth < _MAX_DEPTH and budget[0] > 0:
            for label, child in _children(node, registered):
                if id(child) in seen:
                    continue  # pickled once, by the first path that reaches it
                seen[id(child)] = child
                budget[0] -= 1
                try:
                    # A standalone pickle has its own header and STOP opcode.
                    child_size = (
                        _pickled_size(child, exclude=seen, registered=registered)
                        - _STANDALONE_OVERHEAD
                    )
                except Exception:
                    continue
                if child_size >= threshold:
                    own -= child_size
                    visit(child, path + label, child_size, depth + 1)
        if own >= threshold:
            contributors.append(Contributor(path, _type_name(node), own))

    seen[id(obj)] = obj
    visit(obj, root, total, 0)
    contributors.sort(key=lambda c: c.nbytes, reverse=True)
    return PayloadReport(root=root, total_bytes=total, contributors=tuple(contributors))


# ---------------------------------------------------------------------------
# Guard
# ---------------------------------------------------------------------------


class PayloadTooLargeError(TuneError):
    """What Tune would register for a trainable is over the payload limit.

    Raised on the driver, before anything is sent to the GCS. ``report`` is the
    :class:`PayloadReport` that names the parts to move out; ``limit`` is the
    limit in bytes that was exceeded.
    """

    def __init__(self, message: str, report: PayloadReport, limit: int):
        super().__init__(message)
        self.report = report
        self.limit = limit

    def __reduce__(self):
        # Ray's dual exception classes (RayTaskError(PayloadTooLargeError)) have a
        # one-argument __init__: they pickle as this class (Ray Client on 2.40).
        cls = type(self)
        if cls.__init__ is not PayloadTooLargeError.__init__:
            cls = PayloadTooLargeError
        return (cls, (self.args[0], self.report, self.limit))


_FIX_ADVICE = (
    "Fix: pass large objects through the object store instead of capturing them: "
    "`tune.with_parameters(trainable, data=data)` for a function or class "
    "trainable, `ref = ray.put(data)` and `ray.get(ref)` inside the training "
    "function, or a `ray_tt_ext` trainer (its constructor arguments travel "
    "through the object store)."
)


def _validate_limit(value: Any, source: str) -> int:
    try:
        limit = int(value)
    except (TypeError, ValueError):
        raise ValueError(
            f"{source} must be an integer number of bytes, got {value!r}."
        ) from None
    if limit <= 0:
        raise ValueError(f"{source} must be a positive number of bytes, got {limit}.")
    if limit > GRPC_MAX_MESSAGE_BYTES:
        raise ValueError(
            f"{source}={limit} is above the gRPC message limit in force "
            f"({GRPC_MAX_MESSAGE_BYTES} bytes): a payload that size cannot be "
            f"sent. Use a value <= {GRPC_MAX_MESSAGE_BYTES}."
        )
    return limit


def resolve_payload_limit(limit: Optional[int] = None) -> int:
    """The guard's limit: explicit, else ``RAY_TT_EXT_PAYLOAD_LIMIT``, else Ray's.

    Ray's default is ``FUNCTION_SIZE_ERROR_THRESHOLD`` (what Ray itself
    refuses to export); never above :data:`GRPC_MAX_MESSAGE_BYTES`.
    """
    if limit is not None:
        return _validate_limit(limit, "payload_limit")
    env = os.environ.get(PAYLOAD_LIMIT_ENV_VAR)
    if env:
        return _validate_limit(env, PAYLOAD_LIMIT_ENV_VAR)
    return min(_compat.FUNCTION_SIZE_ERROR_THRESHOLD, GRPC_MAX_MESSAGE_BYTES)


def find_unpicklable_part(obj: Any, error: BaseException) -> tuple[str, str, str]:
    """Where pickling ``obj`` fails: ``(path, type name, error)`` of the deepest part.

    Follows the first child that fails to pickle alone, the way cloudpickle
    walks the graph, down to a part none of whose children fail.
    """
    path, node = _root_name(obj), obj
    for _ in range(_MAX_DEPTH):
        for label, child in _children(node):
            try:
                _pickled_size(child)
            except Exception as e:
                path, node, error = path + label, child, e
                break
        else:
            break
    return path, _type_name(node), f"{type(error).__name__}: {error}"


def _not_serializable_error(what: str, obj: Any, error: BaseException) -> TypeError:
    """Ray's diagnosis of a non-serializable trainable, with the path to the culprit."""
    import io

    from ray.util.check_serialize import inspect_serializability

    path, type_name, reason = find_unpicklable_part(obj, error)
    trace = io.StringIO()
    try:
        inspect_serializability(obj, print_file=trace)
    except Exception as e:  # the trace is a help, not the error
        trace.write(f"(inspect_serializability failed: {e})")
    return TypeError(
        f"{what} is not serializable, so Tune cannot send it to its trial actors: "
        f"pickling it raised {reason}. The part at fault: {path} ({type_name}). "
        "Fix: create that object inside the trainable (in the training function or "
        "setup()) instead of capturing it. Ray's trace of the non-serializable "
        f"objects found in it:\n{trace.getvalue()}"
    )


_TUNE_REGISTERS = "Tune would register it in the GCS in one gRPC message (limit {grpc})"


def check_registered_payload(
    trainable: Any,
    *,
    what: str,
    limit: Optional[int] = None,
    name: Optional[str] = None,
    sent_as: str = _TUNE_REGISTERS,
    advice: str = _FIX_ADVICE,
) -> PayloadReport:
    """Measure what Tune will register for ``trainable``; raise if it is too large.

    Runs on the driver (or in Ray Client's remote Tuner actor) before the
    trainable is registered. Objects with the :data:`REDUCE_HOOK` are measured
    as Tune will register them (a trainer's parameters pending for the object
    store, as the references they become).

    ``sent_as`` says how the payload travels (``{grpc}`` is the gRPC limit)
    and ``advice`` how to shrink it; both name the Tune path by default.

    Raises:
        PayloadTooLargeError: the payload is over ``limit``.
        TypeError: the trainable cannot be pickled (as Ray's
            ``TunerInternal._validate_trainable`` raises it, with the path to the
            part at fault).
    """
    resolved = resolve_payload_limit(limit)
    try:
        report = inspect_registered(trainable, name=name)
    except (TypeError, AttributeError, pickle.PicklingError) as e:
        # What cloudpickle raises for a lock, a socket, a local class...
        raise _not_serializable_error(what, trainable, e) from e
    if report.total_bytes > resolved:
        raise PayloadTooLargeError(
            f"{what} is {format_bytes(report.total_bytes)} when pickled, over the "
            f"payload limit of {format_bytes(resolved)} ({resolved} bytes); "
            f"{sent_as.format(grpc=format_bytes(GRPC_MAX_MESSAGE_BYTES))}. Largest "
            f"parts:\n{report.format(top=5)}\n{advice}",
            report=report,
            limit=resolved,
        )
    if report.total_bytes > _compat.FUNCTION_SIZE_WARN_THRESHOLD:
        logger.warning(
            "%s is %s when pickled (Ray warns above %s). Largest parts:\n%s\n%s",
            what,
            format_bytes(report.total_bytes),
            format_bytes(_compat.FUNCTION_SIZE_WARN_THRESHOLD),
            report.format(top=5),
            advice,
        )
    return report
