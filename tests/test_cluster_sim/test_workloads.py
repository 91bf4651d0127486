"""The workloads: the teacher task's properties and the name registry (no TensorFlow)."""

import numpy as np
import pytest

from cluster_sim import workloads
from cluster_sim.numpy_mlp import MLP
from cluster_sim.workloads import TEACHER_TARGET, TEACHER_TRAINING, WORKLOADS, load, teacher


@pytest.fixture(scope="module")
def task():
    return teacher()


def test_teacher_is_deterministic_and_seed_changes_the_task():
    a = teacher(train_size=500, test_size=200)
    b = teacher(train_size=500, test_size=200)
    c = teacher(seed=1, train_size=500, test_size=200)
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.x_train, c.x_train)
    # The test set does not depend on how many training rows are drawn.
    big = teacher(train_size=2000, test_size=200)
    assert np.array_equal(a.x_test, big.x_test) and np.array_equal(a.y_test, big.y_test)


def test_teacher_default_sizes_types_and_target(task):
    assert task.x_train.shape == (100_000, 32) and task.x_test.shape == (20_000, 32)
    assert task.x_train.dtype == np.float32 and task.y_train.dtype == np.int64
    assert task.num_classes == 10 and task.name == "teacher"
    # One validation example is under 0.1 accuracy point.
    assert 100.0 / len(task.y_test) < 0.1
    assert task.target == TEACHER_TARGET and task.target["loss"] > 0


def test_teacher_classes_are_not_degenerate(task):
    freq = np.bincount(task.y_train, minlength=10) / len(task.y_train)
    # Every class present; none dominant (a constant guess stays far below the target).
    assert freq.min() > 0.02 and freq.max() < 0.25
    assert freq.max() < TEACHER_TARGET["accuracy"] - 0.3


def test_teacher_inputs_have_a_power_law_spectrum(task):
    eig = np.sort(np.linalg.eigvalsh(np.cov(task.x_train[:20_000].T)))[::-1]
    # lambda_k ~ 1/k with mean 1: the first is about 32 / H_32 = 7.9, the last 32x smaller.
    assert eig.mean() == pytest.approx(1.0, rel=0.05)
    assert eig[0] / eig[-1] == pytest.approx(32, rel=0.2)


def test_teacher_is_learnable_but_not_in_a_few_updates(task):
    # 200 BSP-sized updates (256 samples, TEACHER_TRAINING) of the benchmark's
    # student: clearly learning, still far from the target (it needs > 1,000).
    model = MLP(task.num_features, task.num_classes, (64, 64), seed=0)
    start_loss, _ = model.evaluate(task.x_test[:5000], task.y_test[:5000])
    rng = np.random.default_rng(0)
    weights = np.full((1, 256), 1 / 256)
    for _ in range(200):
        idx = rng.integers(0, len(task.x_train), 256)
        g = model.gradients(model.params, task.x_train[idx][None], task.y_train[idx][None],
                            weights)[0]
        model.apply(g, TEACHER_TRAINING["learning_rate"], TEACHER_TRAINING["momentum"])
    loss, acc = model.evaluate(task.x_test[:5000], task.y_test[:5000])
    assert loss < start_loss - 0.5
    assert loss > TEACHER_TARGET["loss"] + 0.1 and acc < TEACHER_TARGET["accuracy"]


def test_teacher_rejects_bad_arguments():
    with pytest.raises(ValueError, match="num_classes must be a positive integer >= 2"):
        teacher(num_classes=1)
    with pytest.raises(ValueError, match="train_size"):
        teacher(train_size=0)
    with pytest.raises(ValueError, match="sharpness"):
        teacher(sharpness=0)


def test_load_by_name():
    assert set(WORKLOADS) == {"ctr", "digits", "teacher"}
    d = load("digits")
    assert d.name == "digits" and d.target == {"accuracy": 0.93} and d.num_classes == 10
    t = load("teacher", seed=3, train_size=100, test_size=50)
    assert np.array_equal(t.x_train, teacher(seed=3, train_size=100, test_size=50).x_train)


def test_unknown_name_says_which_exist():
    with pytest.raises(ValueError, match="unknown workload 'cifar10'; choose from 'ctr', "
                                         "'digits', 'teacher'"):
        load("cifar10")


def test_hand_built_dataset_still_positional():
    x = np.zeros((4, 2), np.float32)
    y = np.array([0, 1, 0, 1])
    d = workloads.Dataset(x, y, x, y)
    assert d.name == "" and d.target is None and d.num_classes == 2
