"""Lock the public surface: its names are a contract (`ray_tt_ext.__all__`, the
names the README and the user guide, docs/guide/, document); a rename or a removal fails here."""

import pytest
import ray.tune
import ray.tune.error
import tune_api
from ray.train._internal.storage import StorageContext as RayStorageContext
from ray.train.base_trainer import BaseTrainer as RayBaseTrainer
from ray.train.data_parallel_trainer import DataParallelTrainer as RayDataParallelTrainer

import ray_tt_ext

pytestmark = pytest.mark.quick  # unit tests: scripts/test --quick runs them

EXPECTED = {
    "BaseTrainer",
    "CheckpointConfig",
    "DataParallelTrainer",
    "ExecutorActorDiedError",
    "GRPC_MAX_MESSAGE_BYTES",
    "PayloadReport",
    "PayloadTooLargeError",
    "RemoteBackendExecutor",
    "StorageContext",
    "TrainV2EnabledError",
    "Tuner",
    "UnsupportedRayVersionError",
    "__version__",
    "inspect_payload",
}


def test_all_is_exactly_the_contract():
    assert set(ray_tt_ext.__all__) == EXPECTED
    assert len(ray_tt_ext.__all__) == len(EXPECTED)
    for name in EXPECTED:
        assert hasattr(ray_tt_ext, name), name


def test_public_classes_extend_rays():
    assert issubclass(ray_tt_ext.Tuner, ray.tune.Tuner)
    assert issubclass(ray_tt_ext.BaseTrainer, RayBaseTrainer)
    assert issubclass(ray_tt_ext.DataParallelTrainer, RayDataParallelTrainer)
    assert issubclass(ray_tt_ext.DataParallelTrainer, ray_tt_ext.BaseTrainer)
    assert issubclass(ray_tt_ext.StorageContext, RayStorageContext)
    assert issubclass(ray_tt_ext.CheckpointConfig, tune_api.CheckpointConfig)
    assert issubclass(ray_tt_ext.PayloadTooLargeError, ray.tune.error.TuneError)
    assert "BackendExecutor" in ray_tt_ext.RemoteBackendExecutor.__name__


def test_the_packages_errors_are_public_and_catchable():
    from ray_tt_ext import _compat, _executor

    # The classes the package raises are the ones users import.
    assert ray_tt_ext.TrainV2EnabledError is _compat.TrainV2EnabledError
    assert ray_tt_ext.UnsupportedRayVersionError is _compat.UnsupportedRayVersionError
    assert ray_tt_ext.ExecutorActorDiedError is _executor.ExecutorActorDiedError
    assert issubclass(ray_tt_ext.UnsupportedRayVersionError, ImportError)


def test_grpc_limit_is_rays_configured_value():
    # Ray's configured max_grpc_message_size (512 MiB unless overridden).
    from ray._raylet import Config

    assert ray_tt_ext.GRPC_MAX_MESSAGE_BYTES == Config.max_grpc_message_size()


def test_only_compat_imports_ray_internals():
    from pathlib import Path

    package = Path(ray_tt_ext.__file__).parent
    offenders = []
    for path in package.rglob("*.py"):
        if package / "_compat" in path.parents:
            continue
        text = path.read_text()
        for needle in ("._internal", "ray._private", "ray._raylet", "ray.__version__"):
            if needle in text:
                offenders.append(f"{path.name}: {needle}")
    assert not offenders, offenders


def test_ray_outside_the_supported_range_is_refused_or_warned():
    import warnings

    import pytest
    from packaging.version import Version

    from ray_tt_ext import _compat

    _compat.check_ray_version()  # the installed Ray is in range: silent
    with pytest.raises(_compat.UnsupportedRayVersionError) as info:
        _compat.check_ray_version(Version("2.39.0"))
    message = str(info.value)
    assert "ray==2.39.0" in message and "pip install" in message and ">=2.40.0" in message
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _compat.check_ray_version(Version("2.61.0"))
    assert any("scripts/compat.sh 2.61.0" in str(w.message) for w in caught)


def test_ray_tt_ext_v2_on_a_ray_before_train_v2_names_the_version_to_install(monkeypatch):
    # Ray 2.50 as ray_tt_ext sees it (its version, read once at import): on a real
    # Ray < 2.51 (scripts/compat.sh 2.40, 2.44, 2.50) nothing needs patching.
    from packaging.version import Version

    import ray_tt_ext.v2 as v2
    from ray_tt_ext import _compat
    from ray_tt_ext._compat import train_mode

    old = Version("2.50.0")
    if _compat.RAY_VERSION.release >= _compat.MIN_TRAIN_V2_RAY_VERSION.release:
        monkeypatch.setattr(_compat, "RAY_VERSION", old)
        monkeypatch.setattr(train_mode, "RAY_VERSION", old)
    installed = _compat.RAY_VERSION
    for name in ("Tuner", "DataParallelTrainer", "TorchTrainer", "CheckpointConfig"):
        monkeypatch.delitem(vars(v2), name, raising=False)  # taken before: look up again
        with pytest.raises(v2.UnsupportedRayVersionError) as info:
            getattr(v2, name)
        message = str(info.value)
        assert f"ray_tt_ext.v2.{name} needs ray>=2.51.0" in message, message
        assert f"ray=={installed} is installed" in message
        assert "pip install" in message and "Train V1 integration" in message
