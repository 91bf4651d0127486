"""Faults on the real local cluster: a worker killed and restarted, a worker frozen, NaN
gradients. Training goes on, nothing is lost or applied twice, counters stay consistent.

The shared cluster is left as found: a finalizer resumes and restarts any worker a
failed test left paused or dead.
"""

import gc
import os
import subprocess
import sys
import threading
import time
import weakref

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

import ksync
from strategies.ps_state import STALENESS_BINS
from cluster_sim.harness.signals import Signaller
from cluster_sim.slowdown import SlowdownLayer
from cluster_sim.workloads import compile_classifier, digits, mlp
from strategies import KSyncStrategy
from strategies.checkpoint import PS_FAILURES, KSyncCheckpoint, wait_for_ps

from conftest import NUM_WORKERS

DATA = digits()
VICTIM = NUM_WORKERS - 1
#: seconds a worker stays frozen (the issue asked 20; 10 leaves Adaptive ~2.5x the 100
#: versions asserted on a loaded machine); a failing run gives up after LIMIT_S.
FREEZE_S = 10.0
LIMIT_S = 240.0


@pytest.fixture
def healthy(cluster):
    """The shared cluster, with every task running again after the test."""
    yield cluster
    for job, index in cluster._procs:
        cluster.resume(job, index)
        if not cluster.running(job, index):
            cluster.restart(job, index)


class FaultScript(threading.Thread):
    """Runs ``step(telemetry)`` every 0.2 s while ``model`` trains until it returns True,
    then stops training (or stops it after ``LIMIT_S`` and records that it timed out).
    A thread, not a callback: parameter-server `fit` takes no batch-level callbacks."""

    def __init__(self, strategy, model, step):
        super().__init__(daemon=True)
        self.strategy, self.model, self.step = strategy, model, step
        self.timed_out = False
        self.error = None
        self.finished = threading.Event()

    def run(self):
        t0 = time.monotonic()
        try:
            while not self.finished.wait(0.2):
                if time.monotonic() - t0 > LIMIT_S:
                    self.timed_out = True
                    break
                if self.step(self.strategy.telemetry()):
                    break
        except Exception as err:  # pylint: disable=broad-except
            self.error = err
        self.model.stop_training = True


def build(cluster, policy, us_per_sample=300.0, hidden=(32,), **options):
    strategy = KSyncStrategy(cluster.resolver(), policy=policy, **options)
    with strategy.scope():
        slowdown = SlowdownLayer(NUM_WORKERS)
        model = compile_classifier(mlp(DATA.num_features, DATA.num_classes, hidden=hidden,
                                       slowdown=slowdown),
                                   keras.optimizers.SGD(0.1, momentum=0.9))
    # Steps of ~10 ms: a fault lands mid-round, and training outlasts a restart.
    slowdown.set_speeds([1.0] * NUM_WORKERS, us_per_sample=us_per_sample)
    return strategy, model


def train_until(strategy, model, script, dataset_fn=None, custom_loop=False):
    """Train with ``fit`` (or a ClusterCoordinator loop) until ``script(telemetry)``
    says done; the final telemetry."""
    dataset_fn = dataset_fn or DATA.dataset_fn(32)
    watcher = FaultScript(strategy, model, script)
    watcher.start()
    try:
        if custom_loop:
            coordinator_loop(strategy, model, dataset_fn)
        else:
            # Short epochs: a stopped fit still runs the steps its epoch has queued.
            model.fit(keras.utils.experimental.DatasetCreator(dataset_fn), epochs=10**6,
                      steps_per_epoch=30, verbose=0)
    finally:
        watcher.finished.set()
        watcher.join()
    if watcher.error is not None:
        raise watcher.error
    assert not watcher.timed_out, f"the fault script did not finish within {LIMIT_S} s"
    return strategy.telemetry()


def coordinator_loop(strategy, model, dataset_fn, ahead=30):
    """Schedule steps, never more than ``ahead`` beyond the pushes made, and no join
    until the end: a frozen worker's step blocks nothing but itself."""
    coordinator = strategy.coordinator
    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def step(it):
        def replica_fn(batch):
            x, y = batch
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                    y, model(x, training=True), from_logits=True))
            grads = tape.gradient(loss, model.trainable_variables)
            model.optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        return strategy.run(replica_fn, args=(next(it),))

    # The losses are kept: a result dropped while its worker is frozen makes TensorFlow
    # delete a tensor on that worker, which blocks the chief's eager calls until it thaws.
    losses = []
    while not model.stop_training:
        if len(losses) - strategy.telemetry()["pushed"] < ahead:
            losses.append(coordinator.schedule(step, args=(iterator,)))
        else:
            time.sleep(0.01)
    coordinator.join()


def check_accounting(strategy, t):
    """Every push is applied, dropped or pending; every completed step pushed once, and
    only a step lost with its worker (and re-run elsewhere) may have pushed as well."""
    assert t["applied"] + t["dropped"] + t["pending"] == t["pushed"]
    assert sum(w["pushes"] for w in t["workers"]) == t["pushed"]
    _, steps = strategy.coordinator.worker_busy()
    assert 0 <= t["pushed"] - sum(steps) <= t["retried"], (t["pushed"], steps, t["retried"])


def check_model(model):
    assert all(np.isfinite(w).all() for w in model.get_weights())
    _, accuracy = model.evaluate(DATA.test_dataset(), steps=1, verbose=0)
    assert accuracy >= 0.9, accuracy
    return accuracy


@pytest.mark.parametrize("policy", [ksync.BSP(), ksync.KSync(k=NUM_WORKERS)], ids=repr)
def test_worker_killed_mid_round_and_restarted(healthy, policy, record_property):
    """A worker is killed mid-round and restarted 3 s later. TensorFlow rebuilds the
    cluster from when it sees the failure until the worker is back: the chief makes no
    remote call then (a gate read during the rebuild crashed the chief in native code),
    so the round waits for the restarted worker instead of going on without it; then
    training goes on, nothing lost or counted twice."""
    cluster = healthy
    strategy, model = build(cluster, policy)
    marks = {}
    restart = threading.Thread(target=lambda: (time.sleep(3.0),
                                               cluster.restart("worker", VICTIM)))

    def script(t):
        if "killed" not in marks:
            if t["version"] >= 20:
                cluster.kill("worker", VICTIM)
                marks["killed"] = t
                restart.start()
        elif not restart.is_alive():
            marks.setdefault("restarted", t)
            # As many updates as a run without the fault needs for check_model.
            return t["version"] >= 70 and (t["workers"][VICTIM]["pushes"]
                                           >= marks["restarted"]["workers"][VICTIM]["pushes"] + 10)
        return False

    t = train_until(strategy, model, script)
    restart.join()
    check_accounting(strategy, t)
    assert t["retried"] <= 1  # at most the step the victim was running
    # The chief followed TensorFlow's failure handling: it held its calls while the
    # cluster was being rebuilt, and read again afterwards.
    assert strategy.guard.refused > 0
    assert not strategy.guard.recovering() and strategy.rule.k == NUM_WORKERS
    assert t["version"] > marks["killed"]["version"]
    record_property("accuracy", check_model(model))  # the margin, in --junitxml


def freeze_script(cluster, marks, after_resume_pushes=60):
    def script(t):
        if "signaller" not in marks:
            if t["version"] >= 20:
                pid = cluster.pid("worker", VICTIM)
                marks["signaller"] = Signaller([(0.0, pid, "SIGSTOP"), (FREEZE_S, pid, "SIGCONT")])
                marks["frozen"] = (time.monotonic(), t)
            return False
        if not marks["signaller"].done():
            # Counted from when the stop has landed (a loaded machine can take seconds to
            # start the signaller), plus 1 s for a push already sent to reach the PS.
            # ``t`` counts as frozen only while the victim is still seen stopped after
            # it was read: the signaller reports done a moment after its SIGCONT, and a
            # push the thawed victim finishes in between is not one made while frozen.
            stopped = cluster.stopped("worker", VICTIM)
            if "stopped" not in marks and stopped:
                marks["stopped"] = time.monotonic()
            if stopped and "stopped" in marks and time.monotonic() - marks["stopped"] > 1.0:
                marks.setdefault("early", t)
                marks["late"] = t
            return False
        marks.setdefault("resumed", (time.monotonic(), t))
        return t["pushed"] >= marks["resumed"][1]["pushed"] + after_resume_pushes
    return script


def test_bsp_waits_for_a_frozen_worker_then_resumes(healthy, record_property):
    marks = {}
    strategy, model = build(healthy, ksync.BSP())
    t = train_until(strategy, model, freeze_script(healthy, marks, after_resume_pushes=150))
    marks["signaller"].finish()
    check_accounting(strategy, t)
    assert "early" in marks, "the victim was never seen stopped while the signaller ran"
    assert t["dropped"] == 0 and t["retried"] == 0
    # BSP cannot commit a round without the frozen worker's gradient (the round in
    # progress completes if the worker had pushed to it before it froze).
    assert marks["late"]["version"] <= marks["early"]["version"] + 1
    assert t["version"] > marks["resumed"][1]["version"]  # and resumes afterwards
    # Every round takes one push of each worker; the last may be pending when fit stops.
    pushes = [w["pushes"] for w in t["workers"]]
    assert max(pushes) - min(pushes) <= 1 and t["pending"] < NUM_WORKERS
    record_property("accuracy", check_model(model))  # the margin, in --junitxml


def test_adaptive_keeps_training_while_a_worker_is_frozen(healthy, record_property):
    marks = {}
    strategy, model = build(healthy, ksync.Adaptive(refresh_every=10))
    model.stop_training = False
    # Likewise no garbage collection of earlier tests' tensors during the freeze.
    gc.collect()
    gc.disable()
    try:
        t = train_until(strategy, model, freeze_script(healthy, marks, after_resume_pushes=150),
                        custom_loop=True)
    finally:
        gc.enable()
    marks["signaller"].finish()
    check_accounting(strategy, t)
    assert "early" in marks, "the victim was never seen stopped while the signaller ran"
    early, late = marks["early"], marks["late"]
    # The others went on as K-async without waiting for the frozen worker...
    assert late["version"] >= early["version"] + 100, (early["version"], late["version"])
    assert late["workers"][VICTIM]["pushes"] == early["workers"][VICTIM]["pushes"]
    during = [h for h in t["k_history"] if h["version"] <= early["version"]][-1:] + [
        h for h in t["k_history"] if early["version"] < h["version"] <= late["version"]]
    assert during and all(not h["wait"] or h["k"] < NUM_WORKERS for h in during), during
    # ...and a gradient the frozen worker finished after the thaw (when the freeze
    # caught it mid-step), far beyond the staleness bound, was dropped, not applied.
    victim = t["workers"][VICTIM]
    assert sum(victim["staleness_histogram"][STALENESS_BINS - 1:]) <= victim["dropped"]
    assert t["workers"][VICTIM]["pushes"] > marks["resumed"][1]["workers"][VICTIM]["pushes"]
    record_property("accuracy", check_model(model))  # the margin, in --junitxml


def nan_every(period, worker):
    """Batches of ``worker`` whose index is a multiple of ``period`` hold a NaN feature."""
    base = DATA.dataset_fn(32)

    def dataset_fn(context=None):
        me = tf.distribute.coordinator.experimental_get_current_worker_index()

        def poison(i, batch):
            x, y = batch
            bad = tf.logical_and(tf.equal(me, worker), tf.equal(i % period, 0))
            return tf.where(bad, x * np.nan, x), y
        return base(context).enumerate().map(poison)
    return dataset_fn


@pytest.mark.parametrize("policy", [ksync.BSP(), ksync.ASP()], ids=repr)
def test_nan_gradients_from_one_worker_are_rejected_and_counted(cluster, policy,
                                                                record_property):
    strategy, model = build(cluster, policy, us_per_sample=0.0)
    t = train_until(strategy, model, lambda t: t["pushed"] >= 600,
                    dataset_fn=nan_every(4, worker=1))
    check_accounting(strategy, t)
    assert t["nonfinite"] > 0
    assert t["nonfinite"] == t["dropped"]
    # Worker 1 poisons every 4th of its batches, nobody else any.
    assert t["workers"][1]["dropped"] == t["nonfinite"]
    assert t["nonfinite"] >= (t["workers"][1]["pushes"] - 1) // 4
    record_property("accuracy", check_model(model))  # the margin, in --junitxml


def test_ps_restart_restores_the_last_checkpoint_and_continues(healthy, tmp_path):
    """The documented procedure: fit raises, the PS comes back, the chief builds the
    strategy and model anew, restores the last checkpoint (model, optimizer, version and
    counters, policy and forecaster state) and fits on from the restored epoch."""
    import predictor
    cluster = healthy

    def build():
        strategy = KSyncStrategy(
            cluster.resolver(), policy=ksync.Adaptive(refresh_every=10),
            batch_allocation=predictor.BatchAllocator(96, min_batch=4),
            forecaster=predictor.GRUSmoothingForecaster.default(), allocate_every=10)
        with strategy.scope():
            model = compile_classifier(mlp(DATA.num_features, DATA.num_classes),
                                       keras.optimizers.SGD(0.1, momentum=0.9))
        return strategy, KSyncCheckpoint(strategy, model, tmp_path / "ckpt")

    creator = keras.utils.experimental.DatasetCreator(DATA.dataset_fn(None))
    strategy, ckpt = build()
    assert ckpt.restore() == 0
    ckpt.model.fit(creator, epochs=3, steps_per_epoch=60, verbose=0, callbacks=[ckpt.callback()])
    saved = strategy.telemetry()
    saved_weights = ckpt.model.get_weights()
    assert len(saved["allocation"]["history"]) > 1  # the forecaster has been used

    killer = threading.Timer(1.0, cluster.kill, args=("ps", 0))
    killer.start()
    with pytest.raises(PS_FAILURES):
        ckpt.model.fit(creator, initial_epoch=3, epochs=4, steps_per_epoch=5000, verbose=0,
                       callbacks=[ckpt.callback()])
    killer.join()
    strategy.shutdown()
    cluster.restart("ps", 0)
    wait_for_ps(cluster.resolver(), timeout_s=60)

    strategy, ckpt = build()
    assert ckpt.restore() == 3
    restored = strategy.telemetry()
    for key in ("version", "pushed", "applied", "dropped", "pending", "staleness_histogram",
                "k_history", "rule"):
        assert restored[key] == saved[key], key
    assert restored["allocation"]["sizes"] == saved["allocation"]["sizes"]
    assert restored["allocation"]["history"] == saved["allocation"]["history"]
    assert all(np.array_equal(a, b) for a, b in zip(ckpt.model.get_weights(), saved_weights))

    ckpt.model.fit(creator, initial_epoch=3, epochs=5, steps_per_epoch=60, verbose=0,
                   callbacks=[ckpt.callback()])
    t = strategy.telemetry()
    assert t["pushed"] == saved["pushed"] + 120
    assert t["applied"] + t["dropped"] + t["pending"] == t["pushed"]
    assert t["version"] > saved["version"]
    assert len(t["allocation"]["history"]) > len(saved["allocation"]["history"])
    assert int(ckpt.latest.rpartition("-")[2]) == 5
    check_model(ckpt.model)


def test_restoring_into_a_different_model_or_policy_says_what_to_do(cluster, tmp_path):
    KSyncCheckpoint(*build(cluster, ksync.BSP()), tmp_path).save(1)
    with pytest.raises(ValueError, match="Build the same model"):
        KSyncCheckpoint(*build(cluster, ksync.BSP(), hidden=(48,)), tmp_path).restore()
    with pytest.raises(ValueError, match="use the same policy"):
        KSyncCheckpoint(*build(cluster, ksync.ASP()), tmp_path).restore()
    assert KSyncCheckpoint(*build(cluster, ksync.BSP()), tmp_path).restore() == 1


def test_the_rules_gain_factor_is_restored_and_older_checkpoints_restore(cluster, tmp_path):
    """The PS's gain factor (`ksync.Rule.lr_factor`) is not in the TF checkpoint: the rule
    restored with the controller sets it again, and a checkpoint written before the
    factor existed (no ``lr_factor`` in its side file) restores, at 1."""
    import json
    KSyncCheckpoint(*build(cluster, ksync.BSP(), lr_scaling="power"), tmp_path).save(1)
    side_file = tmp_path / "ckpt-1.ksync.json"
    side = json.loads(side_file.read_text())
    rules = [side["rule"], side["policy_rule"]] + [r for _, r, _ in side["history"]]
    for rule in rules:        # as `ksync.Adaptive(loss_step=True)` could have left it
        rule["lr_factor"] = 0.25
    side_file.write_text(json.dumps(side))
    for factor in (0.25, 1.0):
        strategy, model = build(cluster, ksync.BSP(), lr_scaling="power")
        assert KSyncCheckpoint(strategy, model, tmp_path).restore() == 1
        assert strategy.controller.rule.lr_factor == factor
        assert strategy.telemetry()["lr_scaling"]["factor"] == factor
        for rule in rules:    # the side file of a checkpoint from before the factor
            rule.pop("lr_factor", None)
        side_file.write_text(json.dumps(side))


def test_a_dropped_coordinator_stops_even_while_its_thread_reads_a_hung_ps(healthy,
                                                                          record_property):
    """As under the stock strategy, dropping the strategy and its coordinator and
    collecting once frees them, and the coordinator's destructor stops every thread it
    started (TensorFlow's testClusterCoordinatorDestroyed), even while one of ksync's
    coordinator threads is inside a read of the PS: here a refresh of the rule (what a
    worker thread or the monitor runs, `_GatedClosureQueue._refresh`) blocked on a
    paused PS. A thread holding the strategy then kept the two alive past the collection,
    and their threads running, until a later full collection (`strategies.rule_loop`)."""
    before = set(threading.enumerate())
    strategy = KSyncStrategy(healthy.resolver(), policy=ksync.BSP())
    coordinator = strategy.coordinator
    for _ in range(2 * NUM_WORKERS):  # steps through the gate; the first starts the monitor
        coordinator.schedule(tf.function(lambda: tf.constant(1.0)))
    coordinator.join()
    del coordinator
    started = set(threading.enumerate()) - before
    assert any(t.name == "ksync-monitor" for t in started)
    assert any(t.name.startswith("WorkerClosureProcessingLoop") for t in started)
    queue = strategy.coordinator._cluster.closure_queue
    rule_lock = strategy.rule_lock
    # Once with the PS up: the first call of a function registers it on the PS while
    # holding the interpreter's lock, which a paused PS would never release.
    assert strategy.telemetry()["pushed"] == 0  # reads the PS's counters
    # While the PS is paused, releasing a function on it (garbage of earlier tests)
    # blocks holding the interpreter's lock: collect before, none but ours during, and
    # resume it from another process.
    group = os.getpgid(healthy._procs[("ps", 0)].pid)
    gc.collect()
    gc.disable()
    healthy.pause("ps", 0)
    try:
        reader = threading.Thread(target=queue._refresh, kwargs={"wait": True}, daemon=True)
        reader.start()
        deadline = time.monotonic() + 10.0
        while not rule_lock.locked() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert rule_lock.locked(), "the refresh did not start"
        time.sleep(0.2)  # well inside the read of the paused PS
        assert reader.is_alive()
        strategy_ref = weakref.ref(strategy)
        coordinator_ref = weakref.ref(strategy.coordinator)
        del strategy
        # The destructor stops the cluster, which waits for the read in flight (it holds
        # TensorFlow's cluster update lock): the PS resumes 2 s from now.
        resumer = subprocess.Popen([sys.executable, "-c", "import os, signal, time; "
                                    f"time.sleep(2); os.killpg({group}, signal.SIGCONT)"])
        gc.collect()
        assert strategy_ref() is None and coordinator_ref() is None
        t0 = time.monotonic()
        while any(t.is_alive() for t in started) and time.monotonic() - t0 < 10.0:
            time.sleep(0.05)
        alive = sorted(t.name for t in started if t.is_alive())
        assert not alive, f"still running 10 s after the coordinator was collected: {alive}"
        record_property("threads_stopped_s", round(time.monotonic() - t0, 2))
        reader.join(10.0)
        assert not reader.is_alive()
        assert resumer.wait(10) == 0
    finally:
        gc.enable()
        healthy.resume("ps", 0)
