"""Validation during a real run without stopping it: a background evaluator on the chief.

Validating through ``fit``'s ``validation_data`` drains every worker at the end of each
epoch (a barrier that distorts asynchronous rules) and costs a cluster evaluate. Instead,
`BackgroundEvaluator` is a thread on the chief that, while training continues, reads the
model's trainable weights from the parameter server, evaluates them in numpy on the whole
validation set with the simulator's forward pass (`cluster_sim.numpy_mlp.MLP`, or for a
workload with embedding tables, ``ctr``, `cluster_sim.numpy_ctr.EmbeddingMLP`: one
implementation of the network for both; `numpy_twin`), and records a curve point ``{"wall_s",
"pushes", "version", "loss", "accuracy", "workers", "read_s", "eval_s"}``. Points are at
most ``relative_gap`` of the training time so far apart (and at least ``min_gap_s``), so
the time to target interpolated between two of them (`cluster_sim.report.curve_tta`) is
precise to a small fraction of the run. Each loss also goes to the policy
(`strategies.KSyncStrategy.report_loss`: AdaSync raises K as it falls). ``done`` becomes true once the target (or the
update limit) is reached; the harness's callback then stops ``fit``.

Example:

```python
evaluator = BackgroundEvaluator(model, strategy, data, clock, target_loss=0.3)
evaluator.start()
model.fit(...)            # a callback stops fit when evaluator.done
evaluator.finish()        # stops the thread; raises what it raised
evaluator.evaluate()      # one last point at the end of training
```
"""

import threading
import time

import numpy as np

from cluster_sim.report.results import EVAL_RELATIVE_GAP, target_reached
from cluster_sim.numpy_mlp import MLP

__all__ = ["BackgroundEvaluator", "dense_layers", "numpy_twin"]


def dense_layers(model):
    """The model's Dense layers in order: the MLP the evaluator rebuilds (the slowdown
    layer's per-worker delays are weights too, but no part of the network)."""
    import tf_keras as keras
    return [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]


def numpy_twin(model, data=None):
    """``(network, variables)``: the numpy network that evaluates ``model`` and the
    model's variables whose values, flattened and joined in order, are its ``params``.

    For a workload with a ``layout`` (``ctr``, `cluster_sim.ctr.embedding_mlp`): a
    `cluster_sim.numpy_ctr.EmbeddingMLP` of the model's table and layer sizes, and all
    of ``model.trainable_weights`` (the tables in field order, then the Dense layers;
    a table sharded over the PS tasks is listed shard by shard, in row order, so its
    shards flattened in turn are the whole table flattened). Otherwise a
    `cluster_sim.numpy_mlp.MLP` of the Dense layers and their kernels and biases.
    """
    layers = dense_layers(model)
    if not layers:
        raise ValueError("the model has no Dense layers: the background evaluator "
                         "rebuilds an MLP (cluster_sim.workloads.build_model)")
    sizes = [layers[0].kernel.shape[0]] + [layer.kernel.shape[1] for layer in layers]
    layout = getattr(data, "layout", None)
    if layout is None:
        variables = [v for layer in layers for v in (layer.kernel, layer.bias)]
        return MLP(sizes[0], sizes[-1], sizes[1:-1]), variables
    import tf_keras as keras

    from cluster_sim.numpy_ctr import EmbeddingMLP
    tables = [layer for layer in model.layers if isinstance(layer, keras.layers.Embedding)]
    if [t.input_dim for t in tables] != list(layout.buckets):
        raise ValueError(f"the model's embedding tables have {[t.input_dim for t in tables]}"
                         f" rows, the workload's layout {list(layout.buckets)}")
    network = EmbeddingMLP(layout.buckets, layout.num_dense, sizes[-1],
                           tables[0].output_dim, sizes[1:-1])
    variables = list(model.trainable_weights)
    held = sum(int(np.prod(v.shape)) for v in variables)
    if held != network.num_params:
        raise ValueError(f"the model's trainable weights hold {held} numbers, its numpy "
                         f"twin {network.num_params}: not cluster_sim.ctr.embedding_mlp")
    return network, variables


class BackgroundEvaluator(threading.Thread):
    """Evaluates the PS's current weights on ``data``'s validation rows every so often.

    Args:
      model: the tf_keras model being trained (`cluster_sim.workloads.build_model`: an
        MLP, or embedding tables under one for ``ctr``; `numpy_twin`).
      strategy: its `strategies.KSyncStrategy` (for the counters: pushes, version, and
        per-worker pushes, samples and busy time).
      data: a `cluster_sim.workloads.Dataset` (``x_test``, ``y_test``; its ``layout``
        tells a ``ctr`` model).
      clock: the training clock (seconds of training so far).
      target_loss / target_accuracy: ``done`` once validation loss is at most
        ``target_loss`` (accuracy at least ``target_accuracy`` when no target loss).
      max_updates: ``done`` once the PS version reaches it.
      relative_gap, min_gap_s: the next point is ``max(min_gap_s, relative_gap * t)``
        after one at training time ``t``.
      on_point: called with each new point (e.g. a progress bar).
      allocation: record the per-worker batch sizes too (``sizes`` of each point).
    """

    def __init__(self, model, strategy, data, clock, target_loss=None, target_accuracy=None,
                 max_updates=None, relative_gap=EVAL_RELATIVE_GAP, min_gap_s=0.25,
                 on_point=None, allocation=False):
        super().__init__(daemon=True, name="ksync-evaluator")
        self.network, self._variables = numpy_twin(model, data)
        self.model, self.strategy, self.clock = model, strategy, clock
        self.x, self.y = data.x_test, np.asarray(data.y_test)
        self.target_loss, self.target_accuracy = target_loss, target_accuracy
        self.max_updates = max_updates
        self.relative_gap, self.min_gap_s = relative_gap, min_gap_s
        self.on_point, self.allocation = on_point, allocation
        self.curve = []
        self.done = False
        self.error = None
        self._halt = threading.Event()
        self._lock = threading.Lock()  # one evaluation at a time (thread and final call)

    def read_weights(self) -> list:
        """The network's weights (`numpy_twin`'s variables) as numpy arrays, read from
        the PS."""
        return [np.asarray(v.numpy()) for v in self._variables]

    def evaluate_weights(self, weights) -> tuple[float, float]:
        """(mean cross-entropy, accuracy) of ``weights`` (`read_weights` order) on the
        validation set, in numpy."""
        self.network.params = np.concatenate([w.reshape(-1) for w in weights]).astype(
            self.network.dtype)
        return self.network.evaluate(self.x, self.y)

    def evaluate(self) -> dict:
        """Read, evaluate and record one point now (see the module docstring)."""
        with self._lock:
            started = time.perf_counter()
            t0 = self.clock()
            weights = self.read_weights()
            t1 = self.clock()
            telemetry = self.strategy.telemetry()
            read_s = time.perf_counter() - started
            loss, accuracy = self.evaluate_weights(weights)
            point = {"wall_s": (t0 + t1) / 2, "pushes": int(telemetry["pushed"]),
                     "version": int(telemetry["version"]), "loss": loss,
                     "accuracy": accuracy,
                     "workers": [{k: w[k] for k in ("pushes", "samples", "busy_s")}
                                 for w in telemetry["workers"]],
                     "read_s": read_s, "eval_s": time.perf_counter() - started - read_s}
            if self.allocation:
                point["sizes"] = list(map(int, telemetry["allocation"]["sizes"]))
            self.curve.append(point)
        # Policies that follow the loss (AdaSync) get the validation loss, as the
        # simulator's controller does, so both drive K from the same signal.
        self.strategy.report_loss(loss)
        if self.reached(point) or (self.max_updates and point["version"] >= self.max_updates):
            self.done = True
        if self.on_point is not None:
            self.on_point(point)
        return point

    def reached(self, point) -> bool:
        """Whether the curve up to ``point`` is at or past the target as the time to
        target counts it (`cluster_sim.report.results.target_reached`: the mean of the
        last evaluations, so one evaluation's dip does not stop the run)."""
        upto = self.curve if self.curve and self.curve[-1] is point else [*self.curve, point]
        return target_reached(upto, self.target_loss, self.target_accuracy)

    def run(self):
        try:
            next_t = 0.0
            while not self._halt.is_set() and not self.done:
                now = self.clock()
                if now < next_t:
                    self._halt.wait(min(0.05, next_t - now))
                    continue
                point = self.evaluate()
                next_t = point["wall_s"] + max(self.min_gap_s,
                                               self.relative_gap * point["wall_s"])
        except Exception as err:  # pylint: disable=broad-except
            self.error = err  # raised by finish(), in the training thread
            self.done = True  # stop training: a run without evaluations measures nothing

    def finish(self) -> None:
        """Stop the thread and wait for it; raise what it raised."""
        self._halt.set()
        if self.is_alive():
            self.join()
        if self.error is not None:
            raise RuntimeError(f"the background evaluator failed: {self.error}") from self.error

    def costs(self) -> dict:
        """Median seconds of a read (weights and counters from the PS) and of a numpy
        evaluation, and the number of points."""
        reads = [p["read_s"] for p in self.curve]
        evals = [p["eval_s"] for p in self.curve]
        return {"points": len(self.curve),
                "read_s_p50": float(np.median(reads)) if reads else None,
                "eval_s_p50": float(np.median(evals)) if evals else None}
