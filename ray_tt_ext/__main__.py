"""Command line: ``python -m ray_tt_ext {inspect,check-ray,demo}``.

``inspect MODULE:ATTR`` prints what ``ray.cloudpickle`` would make of an object
(a trainable, a trainer, anything) and exits 1 when it is over the limit, so
it can run in a user's own CI. ``check-ray`` lists every Ray attribute
ray_tt_ext builds on that the installed Ray lacks, without starting Ray, and
exits 1 when one is missing. ``demo`` runs a Tuner over a trainer holding a
large array on a local Ray and tells what happened.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import Any, Optional

EXIT_OK, EXIT_OVER_LIMIT, EXIT_USAGE = 0, 1, 2


class _UsageError(Exception):
    pass


def _load(target: str) -> Any:
    module_name, sep, attr_path = target.partition(":")
    if not sep or not module_name or not attr_path:
        raise _UsageError(
            f"expected MODULE:ATTR (e.g. my_project.train:trainer), got {target!r}"
        )
    sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as e:  # the user's module may raise anything on import
        raise _UsageError(
            f"could not import module {module_name!r}: {type(e).__name__}: {e}"
        ) from e
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise _UsageError(f"{module_name!r} has no attribute {attr_path!r}") from None
    return obj


def _registered_form(obj: Any) -> tuple[Any, Optional[str]]:
    """What travels for ``obj``: a V1 trainer's Tune trainable, a V2 trainer's view.

    A Trainer instance is not what Tune sends to the GCS; its Tune trainable
    is. Built with Ray's ``BaseTrainer._generate_trainable_cls``, which does not
    measure (the CLI measures it with its own limit). A Train V2 trainer is
    measured by what its ``fit()`` sends (``v2._train`` registers that view).
    """
    from ray_tt_ext import _compat

    if isinstance(obj, _compat.BaseTrainer):
        return obj._generate_trainable_cls(), f"the Tune trainable of {type(obj).__name__}"
    if _compat.is_train_v2_trainer(obj):
        from ray_tt_ext.v2 import _train  # noqa: F401  (registers the V2 trainer view)
    return obj, None


def _cmd_inspect(args: argparse.Namespace) -> int:
    from ray_tt_ext._payload import (
        PayloadTooLargeError,
        check_registered_payload,
        format_bytes,
        resolve_payload_limit,
    )

    try:
        limit = resolve_payload_limit(args.limit)
        obj = _load(args.target)
    except (_UsageError, ValueError) as e:
        print(f"ray_tt_ext inspect: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    over = False
    try:
        obj, name = _registered_form(obj)
        report = check_registered_payload(
            obj, what=f"`{args.target}`", limit=limit, name=name
        )
    except PayloadTooLargeError as e:
        report, over = e.report, True
    except Exception as e:
        print(
            f"ray_tt_ext inspect: error: {args.target} cannot be pickled: "
            f"{type(e).__name__}: {e}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.json:
        print(
            json.dumps({**report.to_dict(), "limit": limit, "over_limit": over}, indent=2)
        )
    else:
        print(report.format(top=args.top))
        verdict = "OVER" if over else "within"
        print(f"\n{verdict} the limit of {format_bytes(limit)} ({limit} bytes)")
    return EXIT_OVER_LIMIT if over else EXIT_OK


def _cmd_check_ray(args: argparse.Namespace) -> int:
    from ray_tt_ext._compat import ray_check, versions

    missing = ray_check.missing_ray_attributes()
    v2_since = ray_check.TRAIN_V2_SINCE
    print(
        f"ray=={versions.RAY_VERSION} (ray_tt_ext supports "
        f">={versions.MIN_RAY_VERSION},<{versions.MAX_RAY_VERSION}; ray_tt_ext.v2 "
        f">={v2_since})"
    )
    labels = {
        ray_check.TUNE: "Ray Tune (both Tuners)",
        ray_check.TRAIN_V1: "Ray Train V1 (ray_tt_ext.Tuner's trainers)",
        ray_check.TRAIN_V2: "Ray Train V2 (ray_tt_ext.v2)",
    }
    for part, label in labels.items():
        looked_up = {
            e.ray
            for e in ray_check.RAY_OVERRIDES
            if ray_check.part_of(e) == part and ray_check.applies(e)
        }
        if not looked_up:
            print(f"{label}: needs ray>={v2_since} (not looked up)")
            continue
        lacks = [m for m in missing if m.part == part]
        verdict = f"missing {len(lacks)} of {len(looked_up)}" if lacks else "ok"
        print(f"{label}: {verdict} ({len(looked_up)} Ray attributes looked up)")
        for m in lacks:
            print(f"  - {m}")
    if missing:
        print(
            "\nConstructing a Tuner that builds on a missing attribute raises "
            "ray_tt_ext.UnsupportedRayVersionError before any trial starts. Fix: "
            "install a release listed in docs/compatibility.md."
        )
    return EXIT_OVER_LIMIT if missing else EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    from ray_tt_ext._demo import run_demo

    return run_demo(size_mb=args.size_mb, storage_path=args.storage_path)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ray_tt_ext")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "inspect",
        help="report what ray.cloudpickle would make of MODULE:ATTR",
        description="Exit status: 0 within the limit, 1 over it, 2 on bad usage.",
    )
    p.add_argument("target", help="MODULE:ATTR, e.g. my_project.train:trainable")
    p.add_argument(
        "--limit",
        type=int,
        default=None,
        help="limit in bytes (default: RAY_TT_EXT_PAYLOAD_LIMIT, else Ray's "
        "FUNCTION_SIZE_ERROR_THRESHOLD)",
    )
    p.add_argument("--top", type=int, default=10, help="contributors to list")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_inspect)
    c = sub.add_parser(
        "check-ray",
        help="list the Ray attributes ray_tt_ext needs that the installed Ray lacks",
        description="Does not start Ray. Exit status: 0 when Ray has them all, 1 "
        "when one is missing.",
    )
    c.set_defaults(func=_cmd_check_ray)
    d = sub.add_parser("demo", help="run a Tuner over a trainer with a large array")
    d.add_argument("--size-mb", type=int, default=200, help="attached array size")
    d.add_argument("--storage-path", default=None, help="where results go (temp dir)")
    d.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits 2 on bad usage, 0 on --help
        return int(e.code or 0)
    if getattr(args, "top", 1) < 1:
        print("ray_tt_ext inspect: error: --top must be >= 1", file=sys.stderr)
        return EXIT_USAGE
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
