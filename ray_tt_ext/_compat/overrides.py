"""The map of every Ray method ray_tt_ext overrides, extends, replaces or patches."""

from __future__ import annotations

import dataclasses
from typing import Optional

# ---------------------------------------------------------------------------
# The map of every Ray method ray_tt_ext overrides, extends, replaces or patches
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RayOverride:
    """One place where ray_tt_ext changes a Ray class or function.

    ``ray``: the Ray attribute, ``"module:Qualified.name"``; ``ours``: where
    ray_tt_ext does it, ``"ray_tt_ext.module:Qualified.name"``; ``how``:
    overrides (replaces the method), extends (calls Ray's), replaces (Ray's is
    not called), patches (sets it on Ray's class), adds (a method of ours on a
    subclass of Ray's class, built on the private ``ray`` attribute), uses
    (reads it); ``where``: the process it runs in; ``checked``: the Ray
    releases whose regression suite ran with it (derived: the rows of
    ``MATRIX_RAN`` between ``since`` and ``until``, ``"none"`` when no row is
    there); ``since``: the
    oldest Ray release that has it (below 2.40, the oldest supported: 2.40;
    Train V2's: 2.51 or later); ``until``: the newest release ray_tt_ext uses
    it on (``None``: every release from ``since``), for the way an older Ray
    works where a newer one has another.
    """

    ray: str
    ours: str
    how: str
    where: str
    checked: Optional[str] = None
    since: str = "2.40"
    until: Optional[str] = None

    def __post_init__(self) -> None:
        if self.checked is None:
            object.__setattr__(self, "checked", _ran_between(self.since, self.until))


#: The Ray minors whose row of ``scripts/matrix.sh`` (docs/compatibility.md)
#: passed on this code (the page's code column): what each entry's ``checked`` is derived from
#: (tests/test_compat_map.py holds it to the page's rows).
MATRIX_RAN: tuple[str, ...] = ("2.40", "2.42", "2.43", "2.44", "2.45", "2.46", "2.51", "2.52", "2.53", "2.54", "2.55", "2.56", "2.57", "2.58", "2.59", "2.60")  # fmt: skip


def _minor_key(minor: str) -> tuple[int, ...]:
    return tuple(int(x) for x in minor.split("."))


def _ran_between(since: str, until: Optional[str]) -> str:
    """The range of ``MATRIX_RAN``'s minors from ``since`` to ``until``."""
    ran = [
        m
        for m in MATRIX_RAN
        if _minor_key(since) <= _minor_key(m) <= _minor_key(until or "9.99")
    ]
    return f"{ran[0]} .. {ran[-1]}" if ran else "none"


def _v2(
    ray: str,
    ours: str,
    how: str,
    where: str,
    since: str = "2.51",
    until: Optional[str] = None,
) -> RayOverride:
    """An entry of Ray Train V2 (from 2.51), checked on the Train V2 rows between
    ``since`` and ``until``."""
    return RayOverride(ray, ours, how, where, None, since, until)


_WG = "ray.train.v2._internal.execution.worker_group"
_CONTROLLER = "ray.train.v2._internal.execution.controller:TrainController"
_TRAIN_V2 = "ray.train.v2.api.data_parallel_trainer:DataParallelTrainer"
_TUNER_INTERNAL = "ray.tune.impl.tuner_internal:TunerInternal"
_BASE_TRAINER = "ray.train.base_trainer:BaseTrainer"
_EXECUTOR = "ray.train._internal.backend_executor:BackendExecutor"
_STORAGE = "ray.train._internal.storage:StorageContext"
_FUNCTION_TRAINABLE = "ray.tune.trainable.function_trainable:FunctionTrainable"

#: ``scripts/matrix.sh`` on a new Ray runs ``tests/test_compat_map.py``, which
#: checks that each ``ray`` attribute still exists: what moved is named there.
RAY_OVERRIDES: tuple[RayOverride, ...] = (
    # -- Tuner (driver, or under Ray Client the Tuner actor) --------------------
    RayOverride("ray.tune:Tuner.__init__", "ray_tt_ext._tuner:Tuner.__init__", "replaces", "driver / Ray Client client"),
    RayOverride("ray.tune:Tuner.restore", "ray_tt_ext._tuner:Tuner.restore", "replaces", "driver / Ray Client client"),
    RayOverride("ray.tune.tuner:_force_on_current_node", "ray_tt_ext._tuner:_remote_tuner_internal_cls", "replaces", "Ray Client client (Ray's client Tuner actor)"),
    RayOverride(f"{_TUNER_INTERNAL}.__init__", "ray_tt_ext._tuner:_TunerInternal.__init__", "extends", "driver / Ray Client Tuner actor"),
    RayOverride(f"{_TUNER_INTERNAL}.__getstate__", "ray_tt_ext._tuner:_TunerInternal.__getstate__", "extends", "driver / Ray Client Tuner actor"),
    RayOverride(f"{_TUNER_INTERNAL}.__setstate__", "ray_tt_ext._tuner:_TunerInternal.__setstate__", "extends", "driver / Ray Client Tuner actor"),
    RayOverride(f"{_TUNER_INTERNAL}._convert_trainable", "ray_tt_ext._tuner:_TunerInternal._convert_trainable", "overrides", "driver / Ray Client Tuner actor"),
    RayOverride(f"{_TUNER_INTERNAL}._validate_trainable", "ray_tt_ext._tuner:_TunerInternal._validate_trainable", "overrides", "driver / Ray Client Tuner actor"),
    RayOverride(f"{_TUNER_INTERNAL}.fit", "ray_tt_ext._tuner:_TunerInternal.fit", "extends", "driver / Ray Client Tuner actor"),
    RayOverride(f"{_TUNER_INTERNAL}._converted_trainable", "ray_tt_ext._tuner:_TunerInternal._fit_registered_as", "patches", "driver / Ray Client Tuner actor, while a fit runs"),
    RayOverride("ray.tune.registry:_Registry.register", "ray_tt_ext._compat.core:guard_tune_registry", "patches", "driver / Ray Client Tuner actor (Tune's global registry)"),
    RayOverride("ray.tune.registry:_Registry.flush_values", "ray_tt_ext._compat.core:guard_tune_registry", "patches", "driver / Ray Client Tuner actor (Tune's global registry)"),
    RayOverride("ray.tune.registry:_Registry.unregister", "ray_tt_ext._compat.core:guard_tune_registry", "patches", "driver / Ray Client Tuner actor (Tune's global registry)"),
    RayOverride(f"{_TUNER_INTERNAL}._get_tune_run_arguments", "ray_tt_ext._tuner:_TunerInternal._get_tune_run_arguments", "extends", "driver / Ray Client Tuner actor"),
    RayOverride("ray.tune.logger.logger:LoggerCallback._restore_from_remote", "ray_tt_ext._tune_logs:_DriverCopyFirst._restore_from_remote", "overrides", "driver / Ray Client Tuner actor"),
    RayOverride("ray.tune.execution.tune_controller:TuneController._schedule_trial_pause", "ray_tt_ext._compat.tune_loop:_TuneController._schedule_trial_pause", "extends", "driver / Ray Client Tuner actor (Tune's loop)"),
    RayOverride("ray.tune.execution.tune_controller:TuneController._schedule_trial_stop", "ray_tt_ext._compat.tune_loop:_TuneController._schedule_trial_stop", "extends", "driver / Ray Client Tuner actor (Tune's loop: the index moved past the folders of the saves a stopped class trainable's actor still runs)"),
    RayOverride("ray.tune.execution.tune_controller:TuneController._schedule_trial_save", "ray_tt_ext._compat.tune_loop:_TuneController._schedule_trial_save", "extends", "driver / Ray Client Tuner actor (Tune's loop: each save kept until Tune records it)"),
    RayOverride("ray.tune.execution.tune_controller:TuneController._on_saving_result", "ray_tt_ext._compat.tune_loop:_TuneController._on_saving_result", "extends", "driver / Ray Client Tuner actor (Tune's loop: a save recorded)"),
    RayOverride("ray.train._internal.session:_FutureTrainingResult.future", "ray_tt_ext._compat.tune_loop:_TuneController._schedule_trial_save", "uses", "driver / Ray Client Tuner actor (Tune's loop: the save's ObjectRef)"),
    RayOverride("ray.tune.trainable.function_trainable:FunctionTrainable", "ray_tt_ext._compat.tune_loop:_TuneController._schedule_trial_stop", "uses", "driver / Ray Client Tuner actor (Tune's loop: a function trainable's save writes no folder)"),
    RayOverride("ray.tune.experiment.trial:Trial.get_trainable_cls", "ray_tt_ext._compat.tune_loop:_TuneController._schedule_trial_stop", "uses", "driver / Ray Client Tuner actor (Tune's loop: a class or a function trainable)"),
    RayOverride("ray.train._internal.storage:StorageContext.current_checkpoint_index", "ray_tt_ext._compat.tune_loop:_TuneController._schedule_trial_stop", "uses", "driver / Ray Client Tuner actor (Tune's loop: the trial's index moved past a dropped save's folder)"),
    RayOverride("ray.tune.execution.tune_controller:TuneController.__init__", "ray_tt_ext._compat.tune_loop:_TuneController.__init__", "extends", "driver / Ray Client Tuner actor (Tune's loop)"),
    RayOverride("ray.air.execution.resources.placement_group:PlacementGroupResourceManager.cancel_resource_request", "ray_tt_ext._compat.tune_loop:_PlacementGroupsRemovedOnceCreated.cancel_resource_request", "overrides", "driver / Ray Client Tuner actor (Tune's loop)"),
    RayOverride("ray.air.execution.resources.placement_group:PlacementGroupResourceManager.get_resource_futures", "ray_tt_ext._compat.tune_loop:_PlacementGroupsRemovedOnceCreated.get_resource_futures", "extends", "driver / Ray Client Tuner actor (Tune's loop)"),
    RayOverride("ray.air.execution.resources.placement_group:PlacementGroupResourceManager.update_state", "ray_tt_ext._compat.tune_loop:_PlacementGroupsRemovedOnceCreated.update_state", "extends", "driver / Ray Client Tuner actor (Tune's loop)"),
    RayOverride("ray.air.execution.resources.placement_group:PlacementGroupResourceManager.clear", "ray_tt_ext._compat.tune_loop:_PlacementGroupsRemovedOnceCreated.clear", "extends", "driver / Ray Client Tuner actor (Tune's loop, a fit's end)"),
    RayOverride("ray.air.execution.resources.placement_group:PlacementGroupResourceManager.__del__", "ray_tt_ext._compat.tune_loop:_PlacementGroupsRemovedOnceCreated.__del__", "overrides", "wherever the manager is collected (driver / Ray Client Tuner actor)"),
    RayOverride("ray.tune.execution.cluster_info:_is_ray_cluster", "ray_tt_ext._compat.tune_loop:leaves_data_cpus", "uses", "driver / Ray Client Tuner actor (a fit over datasets: on a cluster Ray's launcher started, Tune's placement as is)"),
    RayOverride("ray.air.execution.resources.placement_group:PlacementGroupResourceManager.request_resources", "ray_tt_ext._compat.tune_loop:_TrialsLeavingDataCpus.request_resources", "extends", "driver / Ray Client Tuner actor (Tune's loop, a fit over datasets: a trial's request waits while its pipeline's CPUs would not fit)"),
    RayOverride("ray.air.execution.resources.placement_group:PlacementGroupResourceManager.update_state", "ray_tt_ext._compat.tune_loop:_TrialsLeavingDataCpus.update_state", "extends", "driver / Ray Client Tuner actor (Tune's loop, a fit over datasets: the waiting requests that fit now are made)"),
    RayOverride("ray.air.execution.resources.placement_group:PlacementGroupResourceManager.cancel_resource_request", "ray_tt_ext._compat.tune_loop:_TrialsLeavingDataCpus.cancel_resource_request", "extends", "driver / Ray Client Tuner actor (Tune's loop, a fit over datasets: a waiting request is dropped)"),
    RayOverride("ray.air.execution.resources.placement_group:PlacementGroupResourceManager._pg_to_request", "ray_tt_ext._compat.tune_loop:_TrialsLeavingDataCpus._fits", "uses", "driver / Ray Client Tuner actor (Tune's loop: the fit's placement groups, requested, created and taken)"),
    RayOverride("ray.tune.tune:TuneController", "ray_tt_ext._compat.tune_loop:tune_controller_fixed", "patches", "driver / Ray Client Tuner actor (the class tune.run makes its controller with; Ray's behaviour outside a ray_tt_ext fit)"),
    RayOverride(f"{_TUNER_INTERNAL}.fit", "ray_tt_ext._tuner:_ClientTunerInternal.fit", "extends", "Ray Client Tuner actor"),
    RayOverride(f"{_TUNER_INTERNAL}.get_results", "ray_tt_ext._tuner:_ClientTunerInternal.get_results", "extends", "Ray Client Tuner actor"),
    RayOverride("ray.tune.experiment:Experiment._storage_context_cls", "ray_tt_ext._storage:checkpoint_policy_installed", "patches", "driver, while a fit runs"),
    # -- V1 trainers -----------------------------------------------------------
    RayOverride("ray.train.base_trainer:_train_coordinator_fn", "ray_tt_ext._trainer:_train_coordinator_fn", "replaces", "trial actor (coordinator)"),
    RayOverride(f"{_BASE_TRAINER}._validate_attributes", "ray_tt_ext._trainer:BaseTrainer._validate_attributes", "overrides", "driver and trial actor"),
    RayOverride(f"{_BASE_TRAINER}.fit", "ray_tt_ext._trainer:BaseTrainer.fit", "extends", "driver"),
    RayOverride(f"{_BASE_TRAINER}._generate_trainable_cls", "ray_tt_ext._trainer:BaseTrainer._generate_trainable_cls", "overrides", "driver"),
    RayOverride(f"{_BASE_TRAINER}._extract_fields_for_tuner_param_space", "ray_tt_ext._trainer:BaseTrainer._extract_fields_for_tuner_param_space", "overrides", "driver"),
    RayOverride(f"{_BASE_TRAINER}.as_trainable", "ray_tt_ext._trainer:BaseTrainer.as_trainable", "overrides", "driver"),
    RayOverride(f"{_FUNCTION_TRAINABLE}.setup", "ray_tt_ext._trainer:_TrainCoordinator.setup", "overrides", "trial actor"),
    RayOverride(f"{_FUNCTION_TRAINABLE}.cleanup", "ray_tt_ext._trainer:_TrainCoordinator.cleanup", "extends", "trial actor"),
    RayOverride(f"{_FUNCTION_TRAINABLE}._trainable_func", "ray_tt_ext._trainer:_TrainCoordinator._trainable_func", "overrides", "trial actor"),
    RayOverride("ray.tune.trainable:Trainable.default_resource_request", "ray_tt_ext._trainer:_TrainCoordinator.default_resource_request", "overrides", "driver"),
    RayOverride("ray.train.data_parallel_trainer:DataParallelTrainer._propagate_results", "ray_tt_ext._trainer:DataParallelTrainer._propagate_results", "extends", "trial actor (coordinator)"),
    RayOverride("ray.train.data_parallel_trainer:DataParallelTrainer._backend_executor_cls", "ray_tt_ext._trainer:_executors_shut_down", "patches", "trial actor, per trainer instance"),
    # -- StorageContext (where checkpoints are saved, and the driver) -----------
    RayOverride(f"{_STORAGE}._update_checkpoint_index", "ray_tt_ext._storage:StorageContext._update_checkpoint_index", "overrides", "trial actor, training workers, coordinator, driver"),
    RayOverride(f"{_STORAGE}.checkpoint_dir_name", "ray_tt_ext._storage:StorageContext.checkpoint_dir_name", "overrides", "wherever a checkpoint is saved"),
    RayOverride(f"{_STORAGE}.persist_current_checkpoint", "ray_tt_ext._storage:StorageContext.persist_current_checkpoint", "extends", "trial actor, training workers"),
    # -- The remote executor (executor host, training workers) ------------------
    RayOverride(f"{_EXECUTOR}.__init__", "ray_tt_ext._executor_host:_HostedBackendExecutor.__init__", "extends", "executor host"),
    RayOverride(f"{_EXECUTOR}.start", "ray_tt_ext._executor_host:_HostedBackendExecutor.start", "overrides", "executor host"),
    RayOverride(f"{_EXECUTOR}.start_training", "ray_tt_ext._executor_host:_HostedBackendExecutor.start_training", "extends", "executor host"),
    RayOverride("ray.actor:_modify_class", "ray_tt_ext._compat.train_v1:wait_for_workers_to_take_their_calls", "uses", "executor host (the workers' __ray_ready__, after Ray's start_training)"),
    RayOverride(f"{_EXECUTOR}.shutdown", "ray_tt_ext._executor_host:_HostedBackendExecutor.shutdown", "extends", "executor host"),
    RayOverride(f"{_EXECUTOR}._create_placement_group", "ray_tt_ext._executor_host:_HostedBackendExecutor._create_placement_group", "overrides", "executor host"),
    RayOverride(f"{_EXECUTOR}._restart", "ray_tt_ext._executor_host:_HostedBackendExecutor._restart", "extends", "executor host"),
    RayOverride(f"{_EXECUTOR}.get_next_results", "ray_tt_ext._executor:RemoteBackendExecutor.get_next_results", "replaces", "coordinator (trial actor): reads the workers' results as Ray's does"),
    RayOverride(f"{_EXECUTOR}.get_with_failure_handling", "ray_tt_ext._executor:RemoteBackendExecutor.get_next_results", "uses", "executor host, asked by the coordinator on a worker's failure"),
    RayOverride("ray.train._internal.utils:check_for_failure", "ray_tt_ext._executor:RemoteBackendExecutor._wait_and_let_go", "replaces", "coordinator (trial actor): the same checks, letting each worker go as its result arrives"),
    RayOverride("ray.train.backend:Backend.on_start", "ray_tt_ext._executor_host:_HostedBackendExecutor.use_data_context", "patches", "executor host, per executor's backend instance"),
    RayOverride("ray.train._internal.backend_executor:WorkerGroup", "ray_tt_ext._compat.train_v1:use_capturing_worker_group", "patches", "executor host (its process only)"),
    RayOverride("ray.train._internal.worker_group:WorkerGroup.add_workers", "ray_tt_ext._compat.train_v1:CapturingWorkerGroup", "uses", "executor host (WorkerGroup._remote_cls.options)"),
    RayOverride("ray._private.worker:Worker.should_capture_child_tasks_in_placement_group", "ray_tt_ext._compat.train_v1:captures_child_tasks", "uses", "coordinator (trial actor)"),
    RayOverride("ray.train._internal.storage:get_fs_and_path", "ray_tt_ext._compat.core:experiment_fs_path", "uses", "driver / Ray Client Tuner actor (StorageContext.experiment_fs_path)"),
    RayOverride("ray.actor:_modify_class", "ray_tt_ext._compat.core:actor_ready_ref", "uses", "executor host (its __ray_ready__ method, to watch coordinators)"),
    RayOverride("ray.train._internal.worker_group:RayTrainWorker._RayTrainWorker__execute", "ray_tt_ext._compat.train_v1:RayTrainWorker.get_next", "adds", "training worker"),
    RayOverride("ray.train._internal.worker_group:RayTrainWorker._RayTrainWorker__execute", "ray_tt_ext._compat.train_v1:RayTrainWorker.let_go", "adds", "training worker"),
    RayOverride("ray.train._internal.session:_TrainSession.get_next", "ray_tt_ext._compat.train_v1:worker_report_synchronously", "patches", "training worker (synchronous_result_reporting)"),
    RayOverride("ray.train._internal.session:_TrainSession.get_next", "ray_tt_ext._compat.train_v1:worker_let_go", "patches", "training worker (continue_lock, _first_report)"),
    RayOverride("ray.train._internal.session:_TrainSession._first_report", "ray_tt_ext._compat.train_v1:worker_let_go", "uses", "training worker"),
    RayOverride("ray.train._internal.session:_TrainSession.continue_lock", "ray_tt_ext._compat.train_v1:worker_let_go", "uses", "training worker"),
    RayOverride("ray.train._internal.session:_TrainSession.synchronous_result_reporting", "ray_tt_ext._compat.train_v1:worker_report_synchronously", "uses", "training worker"),
    RayOverride("ray.train._internal.session:_TrainSession.get_next", "ray_tt_ext._compat.train_v1:_training_over", "uses", "training worker (training_thread, result_queue, error_queue)"),
    # -- The sweep's checkpoint retention (driver / Ray Client Tuner actor, Tune's loop)
    RayOverride("ray.train._internal.checkpoint_manager:_CheckpointManager._checkpoint_results", "ray_tt_ext._compat.tune_checkpoints:drop_checkpoints", "uses", "driver / Ray Client Tuner actor (Tune's loop: a trial's kept checkpoints, read and the deleted dropped)"),
    RayOverride("ray.train._internal.checkpoint_manager:_CheckpointManager._latest_checkpoint_result", "ray_tt_ext._compat.tune_checkpoints:drop_checkpoints", "uses", "driver / Ray Client Tuner actor (Tune's loop: Trial.checkpoint, None once deleted)"),
    RayOverride("ray.tune.trainable.metadata:_TrainingRunMetadata.invalidate_cache", "ray_tt_ext._compat.tune_checkpoints:drop_checkpoints", "uses", "driver / Ray Client Tuner actor (Tune's loop: the trial's saved JSON made again)"),
    RayOverride("ray.tune.schedulers.pbt:PopulationBasedTraining._trial_state", "ray_tt_ext._compat.tune_checkpoints:scheduler_checkpoints", "uses", "driver / Ray Client Tuner actor (Tune's loop: the checkpoints PBT may exploit)"),
    RayOverride("ray.tune.schedulers.pbt:_PBTTrialState.last_checkpoint", "ray_tt_ext._compat.tune_checkpoints:scheduler_checkpoints", "uses", "driver / Ray Client Tuner actor (Tune's loop: the checkpoints PBT may exploit)"),
    RayOverride("ray.train._internal.session:_FutureTrainingResult.resolve", "ray_tt_ext._compat.tune_checkpoints:scheduler_checkpoints", "uses", "driver / Ray Client Tuner actor (Tune's loop: a save PBT waits for, not blocking)"),
    RayOverride("ray.tune.execution.tune_controller:TuneController._mark_trial_to_checkpoint", "ray_tt_ext._compat.tune_checkpoints:records_changed", "uses", "driver / Ray Client Tuner actor (Tune's loop: the trials whose record changed saved again)"),
    RayOverride("ray.tune.execution.tune_controller:TuneController.__getstate__", "ray_tt_ext._compat.tune_loop:_TuneController.__getstate__", "extends", "driver / Ray Client Tuner actor (Tune's loop: the experiment's state saved without the sweep's retention)"),
    RayOverride("ray.tune.execution.tune_controller:TuneController.save_to_dir", "ray_tt_ext._compat.tune_loop:_TuneController.save_to_dir", "extends", "driver / Ray Client Tuner actor (Tune's loop: with the sweep's retention, the records of trials that may run written again, the state uploaded, and the retention told what it names)"),
    RayOverride("ray.tune.execution.tune_controller:TuneController._checkpoint_manager", "ray_tt_ext._compat.tune_checkpoints:take_state_upload", "uses", "driver / Ray Client Tuner actor (as the controller is made: the experiment's storage, as Ray's upload of the experiment's state uses it)"),
    RayOverride("ray.tune.execution.experiment_state:_ExperimentCheckpointManager._storage", "ray_tt_ext._compat.tune_checkpoints:take_state_upload", "patches", "driver / Ray Client Tuner actor (as the controller is made, on this controller's manager, not on the class: a copy of the experiment's storage whose syncer leaves the experiment's state out)"),
    RayOverride("ray.tune.execution.experiment_state:_ExperimentCheckpointManager.sync_up_experiment_state", "ray_tt_ext._compat.tune_checkpoints:take_state_upload", "uses", "driver / Ray Client Tuner actor (Tune's loop: Ray's save of the experiment, then its upload of the staging folder through the manager's storage's syncer)"),
    RayOverride("ray.train._internal.syncer:_BackgroundSyncer.sync_up", "ray_tt_ext._compat.tune_checkpoints:RayUploadWithoutState.sync_up", "extends", "driver / Ray Client Tuner actor (Tune's loop: Ray's upload of the staging folder, the experiment's state left out)"),
    RayOverride("ray.train._internal.syncer:Syncer.sync_up_if_needed", "ray_tt_ext._compat.tune_checkpoints:RayUploadWithoutState.sync_up_if_needed", "extends", "driver / Ray Client Tuner actor (the same, for a call Ray does not make on this syncer today)"),
    RayOverride("ray.train._internal.storage:_ExcludingLocalFilesystem._should_exclude", "ray_tt_ext._compat.tune_checkpoints:RayUploadWithoutState.sync_up", "uses", "driver / Ray Client Tuner actor (Ray's upload thread: the exclude patterns matched against each path in the staging folder)"),
    RayOverride("ray.train._internal.storage:StorageContext.syncer", "ray_tt_ext._compat.tune_checkpoints:take_state_upload", "patches", "driver / Ray Client Tuner actor (as the controller is made: Ray's syncer of the experiment, wrapped, on the manager's copy of the storage, not on the class)"),
    RayOverride("ray.tune.impl.out_of_band_serialize_dataset:out_of_band_serialize_dataset", "ray_tt_ext._compat.tune_checkpoints:save_experiment_state", "uses", "driver / Ray Client Tuner actor (Tune's loop: datasets in trial configs saved as Ray's saves save them)"),
    RayOverride("ray.tune.execution.tune_controller:TuneController._trials", "ray_tt_ext._compat.tune_loop:_TuneController.save_to_dir", "uses", "driver / Ray Client Tuner actor (Tune's loop: the trials whose records are written again, and what the state names)"),
    RayOverride("ray.train._internal.storage:StorageContext.experiment_fs_path", "ray_tt_ext._compat.tune_checkpoints:upload_experiment_state", "uses", "driver / Ray Client Tuner actor (Tune's loop: where the experiment's state goes)"),
    RayOverride("ray.tune.execution.tune_controller:TuneController.save_to_dir", "ray_tt_ext._compat.tune_checkpoints:save_experiment_state", "uses", "driver / Ray Client Tuner actor (Tune's loop: the experiment's state saved before a deletion)"),
    RayOverride("ray.tune.execution.tune_controller:TuneController.experiment_state_file_name", "ray_tt_ext._compat.tune_checkpoints:upload_experiment_state", "uses", "driver / Ray Client Tuner actor (Tune's loop: the file of the experiment's state, uploaded last)"),
    RayOverride("ray.train._internal.storage:StorageContext.experiment_driver_staging_path", "ray_tt_ext._compat.tune_checkpoints:upload_experiment_state", "uses", "driver / Ray Client Tuner actor (Tune's loop: where save_to_dir wrote the experiment's state)"),
    # -- Ray's core, driver ------------------------------------------------------
    RayOverride("ray._private.worker:_post_init_hooks", "ray_tt_ext._compat.core:add_post_init_hook", "patches", "driver"),
    RayOverride("ray._raylet:CoreWorker.remove_object_ref_reference", "ray_tt_ext._compat.core:release_out_of_band_pins", "uses", "driver"),
    # -- Train V2 (Ray >= 2.51) -------------------------------------------------
    RayOverride(f"{_TRAIN_V2}._validate_configs", "ray_tt_ext.v2._train:_V2TrainerMixin._validate_configs", "extends", "driver or Tune trial actor", since="2.51"),
    RayOverride(f"{_TRAIN_V2}._get_train_func", "ray_tt_ext.v2._train:_V2TrainerMixin._get_train_func", "overrides", "driver or Tune trial actor", since="2.51"),
    RayOverride(f"{_TRAIN_V2}.fit", "ray_tt_ext.v2._train:_V2TrainerMixin.fit", "extends", "driver or Tune trial actor", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.train_fn_utils:DistributedTrainFnUtils.report", "ray_tt_ext.v2._train:_NamingTrainFnUtils.report", "extends", "Train V2 training worker", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.train_fn_utils:set_train_fn_utils", "ray_tt_ext.v2._train:PolicyTrainFn.__call__", "patches", "Train V2 training worker", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.train_fn_utils:DistributedTrainFnUtils.get_checkpoint", "ray_tt_ext.v2._train:_NamingTrainFnUtils.get_checkpoint", "extends", "Train V2 training worker", since="2.51"),
    # -- Tune x Train V2: ray_tt_ext.v2.Tuner(trainer) (Ray 2.60) ------------------
    RayOverride(f"{_TRAIN_V2}._initialize_and_run_controller", "ray_tt_ext.v2._trial:_TrialRun._run_controller", "replaces", "Tune trial actor, per trainer instance", since="2.51"),
    RayOverride(f"{_TRAIN_V2}._create_default_callbacks", "ray_tt_ext.v2._trial:_TrialRun.start", "patches", "Tune trial actor, per trainer instance", since="2.51"),
    RayOverride(f"{_TRAIN_V2}._initialize_and_run_controller", "ray_tt_ext.v2._trial:_run_controller_of_a_trial", "patches", "Tune trial actor of a v2.Tuner function trial", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.controller:TrainController.__init__", "ray_tt_ext.v2._controller:TrialController.__init__", "extends", "the run's controller (the Tune trial actor's controller thread)", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.controller:TrainController.worker_group_cls", "ray_tt_ext.v2._controller:TrialController.__init__", "patches", "the run's controller (the Tune trial actor's controller thread)", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.controller:TrainController._poll_workers", "ray_tt_ext.v2._controller:TrialController._poll_workers", "overrides", "the run's controller (the Tune trial actor's controller thread)", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.controller:TrainController.run", "ray_tt_ext.v2._controller:TrialController.run", "extends", "the run's controller (the Tune trial actor's controller thread)", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.controller:TrainController.abort", "ray_tt_ext.v2._controller:TrialController.abort", "overrides", "the run's controller (the Tune trial actor's controller thread; Ray's exits the actor)", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.controller.state:AbortedState", "ray_tt_ext.v2._controller:TrialController.abort", "uses", "the run's controller (trial actor; the state Ray's abort sets)", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.controller:TrainController.get_all_reported_checkpoints", "ray_tt_ext.v2._trial:V2Trial.get_all_reported_checkpoints", "uses", "Tune trial actor (a worker's call, passed to the run's controller)", since="2.51"),
    _v2(f"{_WG}.worker_group:WorkerGroup._init_train_context", "ray_tt_ext.v2._trial:V2Trial.commit_report", "uses", "Tune trial actor (the controller handle Ray gives the workers there is the current actor, the trial actor: its methods pass their calls to the run's controller)", since="2.56"),
    _v2(f"{_WG}.worker_group:WorkerGroup._init_train_context_on_workers", "ray_tt_ext.v2._trial:V2Trial.commit_report", "uses", "Tune trial actor (as _init_train_context, before Ray 2.56)", until="2.55"),
    RayOverride("ray.tune.trainable:Trainable.train", "ray_tt_ext.v2._trial:V2Trial.train", "extends", "Tune trial actor (an async actor: Ray's method in its one Tune thread)", since="2.51"),
    RayOverride("ray.tune.trainable:Trainable.train_buffered", "ray_tt_ext.v2._trial:V2Trial.train_buffered", "extends", "Tune trial actor (an async actor: Ray's loop in its one Tune thread, over Trainable.train, through _SyncTrain, since the trial's train is a coroutine)", since="2.51"),
    RayOverride("ray._private.async_compat:has_async_methods", "ray_tt_ext.v2._trial:V2Trial.commit_report", "uses", "Tune trial actor (Ray makes an actor whose class has a coroutine method an async actor, and runs its other methods on its event loop)", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.controller:TrainController.get_result", "ray_tt_ext.v2._trial:_TrialRun._run_controller", "uses", "Tune trial actor's fit thread (once the run's loop ended)", since="2.51"),
    RayOverride("ray.train.v2._internal.logging.logging:LoggingManager.configure_controller_logger", "ray_tt_ext.v2._controller:TrialController.__init__", "uses", "Tune trial actor (Ray's controller logging set up in the trial's process: its dictConfig keeps existing loggers)", since="2.51"),
    RayOverride("ray.train.v2._internal.callbacks.state_manager:StateManagerCallback.after_controller_start", "ray_tt_ext.v2._controller:TrialController.__init__", "uses", "Tune trial actor (the run's controller_actor_id Ray records is the trial actor's)", since="2.51"),
    RayOverride("ray.tune.trainable:Trainable.save", "ray_tt_ext.v2._trial:V2Trial.save", "extends", "Tune trial actor (an async actor: Ray's method in its one Tune thread)", since="2.51"),
    RayOverride("ray.tune.trainable:Trainable.restore", "ray_tt_ext.v2._trial:V2Trial.restore", "extends", "Tune trial actor (an async actor: Ray's method in its one Tune thread)", since="2.51"),
    RayOverride("ray.tune.trainable:Trainable.reset", "ray_tt_ext.v2._trial:V2Trial.reset", "extends", "Tune trial actor (an async actor: Ray's method in its one Tune thread)", since="2.51"),
    RayOverride("ray.tune.trainable:Trainable.stop", "ray_tt_ext.v2._trial:V2Trial.stop", "extends", "Tune trial actor (an async actor: Ray's method in its one Tune thread)", since="2.51"),
    RayOverride("ray.tune.trainable:Trainable.export_model", "ray_tt_ext.v2._trial:V2Trial.export_model", "extends", "Tune trial actor (an async actor: Ray's method in its one Tune thread)", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.checkpoint.checkpoint_manager:CheckpointManager.register_checkpoint", "ray_tt_ext.v2._controller:TrialController._replay", "uses", "the run's controller (trial actor; the recorded results and their report indices)", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.checkpoint.checkpoint_manager:CheckpointManager.after_report", "ray_tt_ext.v2._controller:TuneReportBridge.after_report", "uses", "the run's controller (trial actor; the report index it counts)", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.context:TrainContext._wait_then_report", "ray_tt_ext.v2._train:_commit_each_report", "patches", "Train V2 training worker (its context instance, under a v2.Tuner trial)", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.worker_group:WorkerGroup._get_worker_runtime_env", "ray_tt_ext.v2._worker_group:TrialWorkerGroup._get_worker_runtime_env", "extends", "the run's controller (the Tune trial actor's controller thread)", since="2.51"),
    _v2(f"{_WG}:WorkerGroup._create_placement_group", "ray_tt_ext.v2._worker_group:TrialWorkerGroup._create_placement_group", "overrides", "the run's controller (the Tune trial actor's controller thread)", since="2.54"),
    _v2(f"{_WG}.placement_group_handle:DefaultPlacementGroupHandle.shutdown", "ray_tt_ext.v2._worker_group:_TunePlacementGroupHandle.shutdown", "overrides", "the run's controller (the Tune trial actor's controller thread)", since="2.54"),
    _v2(f"{_WG}.worker_group:placement_group", "ray_tt_ext.v2._worker_group:_keep_trial_placement_groups_in_train", "patches", "the run's controller (trial actor; WorkerGroup._start_impl creates the group with it: the trial's is given instead)", until="2.53"),
    _v2(f"{_WG}.worker_group:remove_placement_group", "ray_tt_ext.v2._worker_group:_keep_trial_placement_groups_in_train", "patches", "the run's controller (trial actor; a worker group's start that timed out: the trial's is left to Tune)", until="2.53"),
    _v2(f"{_WG}.state:_shutdown_placement_group", "ray_tt_ext.v2._worker_group:_keep_trial_placement_groups_in_train", "patches", "the run's controller (trial actor; a worker group's shutdown: the trial's is left to Tune)", until="2.53"),
    _v2(f"{_WG}.state:WorkerGroupState.placement_group", "ray_tt_ext.v2._worker_group:_trial_placement_group_of", "uses", "the run's controller (trial actor; the group's placement group, before the handle of Ray 2.54)", until="2.53"),
    RayOverride("ray.train.v2._internal.execution.checkpoint.checkpoint_manager:delete_fs_path", "ray_tt_ext.v2._worker_group:_tune_deletes", "patches", "the run's controller (the Tune trial actor's controller thread)", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.checkpoint.checkpoint_manager:CheckpointManager._maybe_load_state_from_storage", "ray_tt_ext.v2._worker_group:_restore_without_deleted", "patches", "the run's controller (the Tune trial actor: a restored snapshot without the checkpoints the sweep deleted)", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.checkpoint.checkpoint_manager:CheckpointManager._assert_checkpoints_exist", "ray_tt_ext.v2._worker_group:_restore_without_deleted", "uses", "the run's controller (the Tune trial actor: Ray's check, off while the snapshot loads)", since="2.51"),
    _v2(f"{_WG}.worker_group:SynchronizationActor", "ray_tt_ext.v2._worker_group:_keep_barriers_in_the_controller", "patches", "the run's controller (trial actor; its worker groups' barriers kept in it, Ray 2.56+)"),
    _v2(f"{_WG}.state:_shutdown_sync_actor", "ray_tt_ext.v2._worker_group:_keep_barriers_in_the_controller", "patches", "the run's controller (trial actor; a kept barrier closed, not killed, Ray 2.56+)"),
    _v2("ray.train.v2._internal.execution.checkpoint.sync_actor:SynchronizationActor", "ray_tt_ext.v2._controller:TrialController.barrier_call", "uses", "the run's controller (trial actor; Ray's class as a plain object, on the barriers' event loop)"),
    _v2("ray.train.v2._internal.execution.checkpoint.sync_actor:SynchronizationActor.reset", "ray_tt_ext.v2._controller:TrialController.close_barrier", "uses", "the run's controller (trial actor; a kept barrier's waiting workers released: without it, Ray's actor is the barrier)", since="2.56"),
    _v2("ray.train.v2._internal.callbacks.preemption_callback:PreemptionCallback.after_worker_group_start", "ray_tt_ext.v2._worker_group:_WatcherInTheController.after_worker_group_start", "overrides", "the run's controller (trial actor; Ray's PreemptionWatcher as a plain object in it)", since="2.57"),
    _v2("ray.train.v2._internal.callbacks.preemption_callback:PreemptionCallback._stop_watcher", "ray_tt_ext.v2._worker_group:_WatcherInTheController._stop_watcher", "overrides", "the run's controller (the Tune trial actor's controller thread)", since="2.57"),
    _v2(f"{_CONTROLLER}._worker_group_callbacks_to_propagate", "ray_tt_ext.v2._controller:TrialController._in_this_controller", "patches", "the run's controller (trial actor; Ray's PreemptionCallback, and with kept workers a TorchConfig run's BackendSetupCallback, swapped for ray_tt_ext's)"),
    _v2("ray.train.v2._internal.callbacks.backend_setup:BackendSetupCallback.after_execution_group_start", "ray_tt_ext.v2._worker_group:_TorchSetupKeepingItsGroup.after_execution_group_start", "overrides", "the run's controller (trial actor; kept workers keep their torch process group)", since="2.56"),
    _v2("ray.train.v2._internal.callbacks.backend_setup:BackendSetupCallback.before_execution_group_shutdown", "ray_tt_ext.v2._worker_group:_TorchSetupKeepingItsGroup.before_execution_group_shutdown", "overrides", "the run's controller (the Tune trial actor's controller thread)", since="2.56"),
    _v2("ray.train.v2._internal.callbacks.backend_setup:BackendSetupCallback.after_worker_group_start", "ray_tt_ext.v2._worker_group:_TorchSetupKeepingItsGroup.after_worker_group_start", "overrides", "the run's controller (trial actor; as after_execution_group_start, the hook's name before Ray 2.56)", until="2.55"),
    _v2("ray.train.v2._internal.callbacks.backend_setup:BackendSetupCallback.before_worker_group_shutdown", "ray_tt_ext.v2._worker_group:_TorchSetupKeepingItsGroup.before_worker_group_shutdown", "overrides", "the run's controller (trial actor; as before_execution_group_shutdown, the hook's name before Ray 2.56)", until="2.55"),
    RayOverride("ray.train.torch.config:_TorchBackend.on_start", "ray_tt_ext._compat.train_v2_bridge:torch_process_group_backend", "uses", "the run's controller (trial actor; Ray's rule for the process group's backend)", since="2.51"),
    RayOverride("ray.train.torch.config:_set_torch_distributed_env_vars", "ray_tt_ext._compat.train_v2_bridge:torch_worker_functions", "uses", "Train V2 training worker (a kept group's torch variables for the new run)", since="2.51"),
    RayOverride("ray.train.torch.config:_shutdown_torch", "ray_tt_ext._compat.train_v2_bridge:torch_worker_functions", "uses", "Train V2 training worker (a kept group's torch shutdown, its process group left)", since="2.51"),
    _v2("ray.train.v2._internal.callbacks.datasets:DatasetsCallback.before_init_train_context", "ray_tt_ext.v2._worker_group:_DatasetsCallback.before_init_train_context", "extends", "the run's controller (trial actor; no DatasetManager actor without datasets, Ray 2.56+)", since="2.54"),
    _v2("ray.train.v2._internal.data_integration.dataset_manager:DatasetManager", "ray_tt_ext.v2._worker_group:without_idle_dataset_manager", "uses", "Tune trial actor (Ray starts one per worker group from 2.56: the datasets callback is swapped there only)", since="2.56"),
    _v2("ray.train.v2._internal.callbacks.placement_group_callback:PlacementGroupCleanerCallback", "ray_tt_ext.v2._trial:_TrialRun.start", "patches", "Tune trial actor (left out of the run's callbacks)", since="2.53"),
    RayOverride(f"{_FUNCTION_TRAINABLE}._trainable_func", "ray_tt_ext.v2._trial:V2Trial._trainable_func", "overrides", "Tune trial actor", since="2.51"),
    RayOverride(f"{_FUNCTION_TRAINABLE}.cleanup", "ray_tt_ext.v2._trial:V2Trial.cleanup", "extends", "Tune trial actor", since="2.51"),
    RayOverride(f"{_FUNCTION_TRAINABLE}.reset_config", "ray_tt_ext.v2._trial:V2Trial.reset_config", "extends", "Tune trial actor", since="2.51"),
    RayOverride("ray.tune.trainable:Trainable.default_resource_request", "ray_tt_ext.v2._trial:V2Trial.default_resource_request", "overrides", "driver", since="2.51"),
    RayOverride(f"{_FUNCTION_TRAINABLE}._trainable_func", "ray_tt_ext.v2._trial:ReleasingTrial._trainable_func", "extends", "Tune trial actor", since="2.51"),
    RayOverride(f"{_FUNCTION_TRAINABLE}.cleanup", "ray_tt_ext.v2._trial:ReleasingTrial.cleanup", "extends", "Tune trial actor", since="2.51"),
    RayOverride(f"{_FUNCTION_TRAINABLE}.setup", "ray_tt_ext.v2._trial:ReleasingTrial.setup", "extends", "Tune trial actor", since="2.51"),
    RayOverride(f"{_FUNCTION_TRAINABLE}.reset_config", "ray_tt_ext.v2._trial:ReleasingTrial.reset_config", "extends", "Tune trial actor", since="2.51"),
    # -- Workers kept between the trials of a reused trial actor (reuse_actors) ----
    RayOverride("ray.train.v2._internal.execution.controller:TrainController.__init__", "ray_tt_ext.v2._controller:TrialController.next_run", "uses", "the run's controller (trial actor; called again on the live object for the next trial's run)", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.controller:TrainController._shutdown_worker_group", "ray_tt_ext.v2._controller:TrialController._shutdown_worker_group", "extends", "the run's controller (the Tune trial actor's controller thread)", since="2.51"),
    _v2("ray.train.v2._internal.execution.controller.state:ShuttingDownState", "ray_tt_ext.v2._worker_group:_ends_cleanly", "uses", "the run's controller (trial actor; its next_state a FinishedState: a clean end)", since="2.52"),
    RayOverride("ray.train.v2._internal.execution.worker_group:WorkerGroup._create_workers", "ray_tt_ext.v2._worker_group:TrialWorkerGroup._create_workers", "extends", "the run's controller (the Tune trial actor's controller thread)", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.worker_group:WorkerGroup.shutdown", "ray_tt_ext.v2._worker_group:TrialWorkerGroup.keep_workers_at_shutdown", "uses", "the run's controller (trial actor; the group's _worker_group_state swapped for _KeepingState before Ray's shutdown runs)", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.worker_group.state:WorkerGroupState.shutdown", "ray_tt_ext.v2._worker_group:_KeepingState.shutdown", "overrides", "the run's controller (the Tune trial actor's controller thread)", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.worker_group.worker:RayTrainWorker.poll_status", "ray_tt_ext.v2._worker_group:_KeptWorkers.idle", "uses", "the run's controller (trial actor; kept workers checked before a run)", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.context:TrainContext.checkpoint_upload_threadpool", "ray_tt_ext.v2._train:_own_upload_pool", "patches", "Train V2 training worker (its context instance, under a v2.Tuner trial)", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.context:MAX_CHECKPOINT_UPLOAD_THREADS", "ray_tt_ext.v2._train:_own_upload_pool", "uses", "Train V2 training worker (the size of Ray's pool)", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.worker_group.worker:RayTrainWorker.run_train_fn", "ray_tt_ext.v2._train:_own_upload_pool", "uses", "Train V2 training worker (it shuts the context's upload pool down when the loop returns)", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.worker_group.worker:RayTrainWorker.shutdown", "ray_tt_ext.v2._worker_group:_KeepingState.shutdown", "uses", "the run's controller (trial actor; on kept workers, without Ray's ray.kill)", since="2.51"),
    RayOverride("ray.train.v2._internal.execution.worker_group.worker:RayTrainWorker.execute", "ray_tt_ext.v2._worker_group:_KeepingState.shutdown", "uses", "the run's controller (trial actor; release_process_group on kept workers)", since="2.51"),
    _v2("ray.train.v2._internal.execution.controller.state:FinishedState", "ray_tt_ext.v2._worker_group:_ends_cleanly", "uses", "the run's controller (the Tune trial actor's controller thread; Ray 2.51: the state of a run that ends cleanly)"),
    # -- What changed between Train V2 releases (detected in _compat.train_v2_bridge) --
    _v2("ray.train.v2._internal.exceptions:UserExceptionWithTraceback._base_exc", "ray_tt_ext.v2._trial:_user_error", "uses", "Tune trial actor's training thread (a worker's error as Ray < 2.55 hands it over, wrapped)", until="2.54"),
    _v2(f"{_CONTROLLER}._start_worker_group", "ray_tt_ext.v2._controller:TrialController._start_worker_group", "extends", "the run's controller (trial actor; before Ray 2.54 a new group's reports are numbered on from the run's last)"),
    _v2(f"{_WG}.worker:RayTrainWorker.init_train_context", "ray_tt_ext.v2._controller:TrialController._start_worker_group", "uses", "the run's controller (trial actor; its current_report_index parameter, Ray 2.54+: reports numbered across worker groups)"),
    _v2("ray.train.v2._internal.execution.checkpoint.checkpoint_manager:CheckpointManager._save_state", "ray_tt_ext.v2._controller:TrialController._number_reports_across_groups", "extends", "the run's controller (trial actor; before Ray 2.54 the snapshot keeps no report indices: ray_tt_ext's entry keeps them)", until="2.53"),
    _v2("ray.train.v2._internal.execution.checkpoint.checkpoint_manager:CheckpointManager._checkpoint_to_report_index", "ray_tt_ext.v2._controller:TrialController._number_reports_across_groups", "patches", "the run's controller (trial actor; before Ray 2.54 a worker group's numbers: the run's are stored)", until="2.53"),
    _v2("ray.train._internal.checkpoint_manager:_CheckpointManager.latest_checkpoint_result", "ray_tt_ext.v2._controller:TrialController._replay", "uses", "the run's controller (trial actor; a snapshot without ray_tt_ext's entry, in a score's order: the latest is the last recorded)", until="2.53"),
    _v2("ray.train.v2._internal.execution.storage:StorageContext.checkpoint_manager_snapshot_path", "ray_tt_ext.v2._controller:TrialController._number_reports_across_groups", "uses", "the run's controller (trial actor; ray_tt_ext's entry read back at a restore)", until="2.53"),
    _v2(f"{_CONTROLLER}._controller_callbacks", "ray_tt_ext.v2._controller:TrialController._before_abort", "uses", "the run's controller (trial actor; their before_controller_abort, Ray 2.55)", until="2.55"),
    _v2("ray.train.v2._internal.execution.callback_manager:CallbackManager.invoke_best_effort", "ray_tt_ext.v2._controller:TrialController._before_abort", "uses", "the run's controller (trial actor; before_controller_abort, as Ray's abort calls it)", since="2.56"),
    _v2("ray.train.v2._internal.execution.context:TrainContext.report_call_index", "ray_tt_ext.v2._train:_recorded_checkpoint_names", "uses", "Train V2 training worker (the checkpoints recorded up to this worker's report() calls, as Ray 2.53+ asks)", until="2.52"),
    RayOverride("ray.train.torch.config:_TorchBackend.on_shutdown", "ray_tt_ext.v2._train:release_process_group", "uses", "Train V2 training worker (a kept worker's process group the next run cannot keep; Ray destroys one only for more than 1 worker)", since="2.51"),
    RayOverride("ray.train.backend:BackendConfig", "ray_tt_ext._compat.train_v2_bridge:reusable_backend", "uses", "the run's controller (trial actor; the backends whose workers are kept: Ray's base BackendConfig and TorchConfig)", since="2.51"),
)  # fmt: skip


# Every name other ray_tt_ext modules (and the tests, scripts and release
# scenarios) take from this module; tests/test_compat_map.py keeps it accurate.
