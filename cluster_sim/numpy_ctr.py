"""The click-through workload's model in numpy (`cluster_sim.ctr.embedding_mlp`): embedding
tables with sparse gradients under an MLP, for the simulator and the evaluator.

Same contract as `cluster_sim.numpy_mlp.MLP` (flat ``params``, ``num_params``,
``dtype``, ``nbytes``, ``gradients(params, x, y, weights)`` for many workers in one
call, ``apply(gradient, learning_rate, momentum)``, ``evaluate(x, y)``), except that a
gradient is a `SparseGradient`: the MLP's gradient (dense, a few thousand numbers) and
only the embedding rows the worker's batch touched. The MLP part is `MLP` itself (its
``backward`` also returns the gradient with respect to its input, the embeddings).

**Momentum on sparse rows.** tf_keras's ``SGD.update_step`` on ``IndexedSlices`` with
momentum does ``m.assign(m * momentum); m.scatter_add(-lr * g); var.assign_add(m)``:
the momentum of *every* row decays and every row moves by it at every step, exactly as
with a dense gradient that is zero outside the touched rows (not the "lazy" sparse
momentum of TF1's ``MomentumOptimizer``, which moves only the touched rows). That is the
semantics here, computed lazily so an update costs O(rows touched), not O(table): each
row remembers the step it was last brought up to date; a row left alone for ``k`` steps
owes ``velocity * (momentum + ... + momentum**k)`` to its weights and ``momentum**k`` to
its velocity, settled (exactly, in closed form) when an update or a read touches it.
Reading ``params`` settles every row (O(table): for evaluations and checks, not per
step); ``gradients(None, ...)`` reads the current parameters and settles only the rows
its batches look up.

Example:

>>> import numpy as np
>>> model = EmbeddingMLP((5, 3), num_dense=1, embedding_dim=2, hidden=(4,), seed=0)
>>> x = np.array([[[0, 2, 0.5], [4, 2, -1.0]]], np.float32)   # 1 worker, 2 rows
>>> (g,) = model.gradients(None, x, np.array([[0, 1]]), np.full((1, 2), 0.5))
>>> g.rows.tolist(), g.values.shape, g.dense.shape   # rows 0, 4 of field 0; 2 of field 1
([0, 4, 7], (3, 2), (34,))
>>> model.apply(g, learning_rate=0.1, momentum=0.9)
"""

import dataclasses

import numpy as np

from cluster_sim.numpy_mlp import MLP

__all__ = ["EmbeddingMLP", "SparseGradient", "GradientSum"]

#: tf_keras ``Embedding``'s default initialiser: uniform in [-0.05, 0.05].
EMBEDDING_INIT = 0.05


@dataclasses.dataclass
class SparseGradient:
    """One gradient of `EmbeddingMLP`: ``dense`` for the MLP's flat parameters,
    ``values[i]`` for embedding row ``rows[i]`` (rows of all the tables, numbered in
    field order; sorted, each once); every other row's gradient is zero."""

    dense: np.ndarray
    rows: np.ndarray
    values: np.ndarray

    @property
    def nbytes(self) -> int:
        """Bytes this gradient moves (as a push would: values, row ids, dense part)."""
        return int(self.dense.nbytes + self.values.nbytes + self.rows.nbytes)

    def norm2(self) -> float:
        """Squared Euclidean norm (of the whole gradient, zero rows included)."""
        d = self.dense.astype(np.float64)
        v = self.values.astype(np.float64)
        return float(d @ d + (v * v).sum())

    def to_dense(self, table_rows: int) -> np.ndarray:
        """The flat gradient in `EmbeddingMLP`'s parameter layout (for checks; O(table))."""
        dim = self.values.shape[1]
        out = np.zeros(table_rows * dim + len(self.dense), self.dense.dtype)
        out[:table_rows * dim].reshape(table_rows, dim)[self.rows] = self.values
        out[table_rows * dim:] = self.dense
        return out


def _sum_rows(keys, values):
    """Sorted unique ``keys`` and the sum of ``values`` (rows) per key."""
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    # np.concatenate, not np.r_: the same mask at a third of np.r_'s cost per call (this
    # runs at every push and every commit).
    starts = (np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
              if len(keys) else keys)
    return keys[starts], np.add.reduceat(values[order], starts, axis=0) if len(keys) \
        else values[:0]


class GradientSum:
    """A running weighted sum of `SparseGradient`s (the PS's aggregate of a round),
    O(rows added) per `add`: ``total(divide_by)`` merges rows that several gradients
    touched. Sums in float64, as the simulator's dense aggregate does."""

    def __init__(self, dense_size: int, dim: int):
        self.dense = np.zeros(dense_size, np.float64)
        self.dim = dim
        self._rows, self._values = [], []

    def add(self, gradient: SparseGradient, scale: float = 1.0) -> None:
        self.dense += scale * gradient.dense.astype(np.float64)
        self._rows.append(gradient.rows)
        self._values.append(scale * gradient.values.astype(np.float64))

    def total(self, divide_by: float = 1.0, dtype=np.float32) -> SparseGradient:
        """The sum so far divided by ``divide_by``, as a `SparseGradient` of ``dtype``."""
        if self._rows:
            rows, values = _sum_rows(np.concatenate(self._rows), np.concatenate(self._values))
        else:
            rows, values = np.zeros(0, np.int64), np.zeros((0, self.dim))
        return SparseGradient((self.dense / divide_by).astype(dtype), rows,
                              (values / divide_by).astype(dtype))

    def clear(self) -> None:
        self.dense[:] = 0.0
        self._rows, self._values = [], []


class EmbeddingMLP:
    """Embedding tables (one per field) + `MLP`, parameters in one flat vector: the
    tables in field order (``sum(buckets) * embedding_dim``), then the MLP's (the
    order of ``model.trainable_weights`` of `cluster_sim.ctr.embedding_mlp`).

    Args:
      buckets: rows of each field's table (`cluster_sim.ctr.CTRLayout.buckets`).
      num_dense: dense features after the fields in a row of ``x``.
      num_classes, embedding_dim, hidden: as `cluster_sim.ctr.embedding_mlp`.
      seed: initialisation (tables uniform in +-0.05 as Keras's ``Embedding``, the MLP
        as `MLP`).
    """

    def __init__(self, buckets, num_dense: int, num_classes: int = 2,
                 embedding_dim: int = 16, hidden=(64, 32), seed: int = 0,
                 dtype=np.float32):
        self.buckets = tuple(int(b) for b in buckets)
        if not self.buckets or min(self.buckets) < 1 or embedding_dim < 1 or num_dense < 0:
            raise ValueError(f"buckets must be positive sizes and embedding_dim >= 1, got "
                             f"{buckets} and {embedding_dim}")
        self.num_fields, self.num_dense, self.dim = len(self.buckets), int(num_dense), \
            int(embedding_dim)
        self.offsets = np.cumsum((0,) + self.buckets[:-1]).astype(np.int64)
        self.table_rows = sum(self.buckets)
        self.dtype = np.dtype(dtype)
        self.top = MLP(self.num_fields * self.dim + self.num_dense, num_classes, hidden,
                       seed=seed, dtype=dtype)
        self.table_size = self.table_rows * self.dim
        self.num_params = self.table_size + self.top.num_params
        self._params = np.empty(self.num_params, self.dtype)
        rng = np.random.default_rng([seed, 0xE3B])
        self._params[:self.table_size] = rng.uniform(-EMBEDDING_INIT, EMBEDDING_INIT,
                                                     self.table_size)
        self._params[self.table_size:] = self.top.params
        self.top.params = self._params[self.table_size:]  # a view: MLP.apply works in place
        self.table = self._params[:self.table_size].reshape(self.table_rows, self.dim)
        # Lazy momentum (module docstring): velocity and last settled step per row.
        self.row_velocity = np.zeros((self.table_rows, self.dim), self.dtype)
        self.row_step = np.zeros(self.table_rows, np.int64)
        self.step = 0
        self._momentum = 0.0  # the momentum the unsettled rows owe under
        self._eval_x, self._eval_chunks = None, {}  # `_eval_inputs`'s arrays

    # -- parameters ------------------------------------------------------------------------
    @property
    def params(self) -> np.ndarray:
        """The flat parameters, every row settled (O(table): not for every step)."""
        self._settle(slice(None))
        return self._params

    @params.setter
    def params(self, value) -> None:
        """Replace the weights (e.g. read from the PS); the velocity is kept."""
        self._settle(slice(None))
        self._params[:] = value

    @property
    def velocity(self) -> np.ndarray:
        """The optimiser's momentum in the parameter layout, settled (O(table))."""
        self._settle(slice(None))
        return np.concatenate([self.row_velocity.reshape(-1), self.top.velocity])

    @property
    def nbytes(self) -> int:
        """Bytes a step moves at the training batch of 32 (`step_nbytes`)."""
        return self.step_nbytes(32)

    def step_nbytes(self, batch_size: int) -> int:
        """Bytes of a push (or a pull) of one ``batch_size``-sample step, at most: the
        MLP's parameters and one embedding row (values and its id) per lookup. Zipf
        frequencies repeat rows, so real pushes are smaller (`SparseGradient.nbytes`)."""
        lookups = min(batch_size * self.num_fields, self.table_rows)
        return self.top.nbytes + lookups * (self.dim * self.dtype.itemsize + 8)

    def _settle(self, rows) -> None:
        """Bring ``rows`` (an index array, duplicates allowed, or a slice) up to date:
        the weight steps and velocity decay they owe since they were last touched."""
        m = self._momentum
        k = self.step - self.row_step[rows]
        decay = np.power(m, k)  # 0 ** 0 == 1: zero momentum zeroes what is older
        owed = k.astype(np.float64) if m == 1.0 else m * (1.0 - decay) / (1.0 - m)
        self.table[rows] += self.row_velocity[rows] * owed[:, None].astype(self.dtype)
        self.row_velocity[rows] *= decay[:, None].astype(self.dtype)
        self.row_step[rows] = self.step

    def _rows_of(self, x2d):
        """Global table rows of each lookup, ``(rows, fields)``."""
        return x2d[:, :self.num_fields].astype(np.int64) + self.offsets

    def _inputs(self, table, x2d, rows):
        """The MLP's input: each field's embedding, then the dense features."""
        emb = table[rows].reshape(len(x2d), -1)
        return np.concatenate([emb, x2d[:, self.num_fields:].astype(self.dtype)], axis=1)

    # -- training --------------------------------------------------------------------------
    def gradients(self, params, x, y, weights) -> list:
        """Per-worker gradients of the weighted cross-entropy, one `SparseGradient` each.

        Args:
          params: flat parameters all these workers read, or None for the model's own
            (settling only the rows looked up: the cheap way).
          x: ``(workers, batch, fields + dense)`` rows of the workload's ``x``;
            y, weights: as `MLP.gradients` (weight 0 marks padding: its rows are left out).
        """
        m, b, f = x.shape
        x2d = x.reshape(m * b, f)
        rows = self._rows_of(x2d)
        if params is None:
            self._settle(rows.reshape(-1))
            params = self._params
        table = params[:self.table_size].reshape(self.table_rows, self.dim)
        dense = np.empty((m, self.top.num_params), self.dtype)
        d_input = self.top.backward(params[self.table_size:], self._inputs(table, x2d, rows),
                                    y, weights, dense, input_gradient=True)
        d_emb = d_input[:, :self.num_fields * self.dim].reshape(-1, self.dim)
        # One key per (worker, row): summing by key gives every worker's rows at once.
        worker = np.repeat(np.arange(m, dtype=np.int64), b * self.num_fields)
        keep = np.repeat(np.asarray(weights).reshape(-1) != 0, self.num_fields)
        keys, values = _sum_rows((worker * self.table_rows + rows.reshape(-1))[keep],
                                 d_emb[keep])
        bounds = np.searchsorted(keys, np.arange(m + 1) * self.table_rows)
        return [SparseGradient(dense[j], keys[lo:hi] - j * self.table_rows, values[lo:hi])
                for j, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:]))]

    def apply(self, gradient: SparseGradient, learning_rate: float, momentum: float) -> None:
        """One SGD-with-momentum step with tf_keras's semantics on ``IndexedSlices``
        (module docstring): O(MLP + rows touched)."""
        self.top.apply(gradient.dense, learning_rate, momentum)
        if momentum != self._momentum:
            self._settle(slice(None))  # what is owed so far was owed at the old momentum
            self._momentum = float(momentum)
        rows = gradient.rows
        self._settle(rows)
        v = self.row_velocity[rows] * self.dtype.type(momentum)
        v -= self.dtype.type(learning_rate) * gradient.values
        self.row_velocity[rows] = v
        self.table[rows] += v
        self.step += 1
        self.row_step[rows] = self.step

    def zero_sum(self) -> GradientSum:
        """An empty aggregate of this model's gradients."""
        return GradientSum(self.top.num_params, self.dim)

    # -- evaluation ------------------------------------------------------------------------
    def evaluate(self, x, y, chunk: int = 50_000):
        """(mean cross-entropy, accuracy) of the current parameters on ``x``, ``y``.

        The MLP's input of each chunk (embeddings, then the dense features) is built in
        an array kept for the next evaluation of the same ``x`` (`_eval_inputs`), so an
        evaluation gathers only the embeddings: the same floats as `_inputs`, without
        recomputing the rows and the dense columns or allocating 25 MB each time."""
        self._settle(slice(None))
        loss = correct = 0.0
        for lo in range(0, len(x), chunk):
            xc, yc = x[lo:lo + chunk], np.asarray(y[lo:lo + chunk])
            rows, emb, inputs = self._eval_inputs(x, lo, xc)
            # mode "raise" would copy through a buffer; the rows were checked when the
            # chunk's input was first built (`_inputs` indexes the table with them).
            np.take(self.table, rows, axis=0, out=emb, mode="clip")
            inputs[:, :emb.size // len(xc)] = emb.reshape(len(xc), -1)
            l, a = self.top.evaluate(inputs, yc)
            loss += l * len(xc)
            correct += a * len(xc)
        return loss / len(x), correct / len(x)

    def _eval_inputs(self, x, lo, xc):
        """``(rows, embeddings, inputs)`` of the chunk of ``x`` at ``lo``: the table rows
        it looks up (flat), an array for their embeddings and the MLP's input with the
        dense features filled in; made once per ``x`` (the same array object: an
        evaluation set is read hundreds of times a run and never changes)."""
        if self._eval_x is not x:
            self._eval_x, self._eval_chunks = x, {}
        key = (lo, len(xc))
        if key not in self._eval_chunks:
            rows = self._rows_of(xc).reshape(-1)
            inputs = self._inputs(self.table, xc, rows.reshape(len(xc), -1))
            emb = np.empty((len(rows), self.dim), self.dtype)
            self._eval_chunks[key] = (rows, emb, inputs)
        return self._eval_chunks[key]
