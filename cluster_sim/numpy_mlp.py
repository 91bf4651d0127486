"""The tf_keras MLP in numpy: the simulator trains it (per-worker gradients in one call)
and the harness evaluates the real model's weights with it.

The discrete-event simulator needs real gradients (so staleness costs what it really
costs) for up to thousands of simulated workers in one process. Gradients of workers
that read the same parameter version are computed together: their mini-batches are
stacked into one ``(workers, batch, features)`` array and the backward pass uses batched
matrix products, so a BSP round of 256 workers is a handful of numpy calls, not 256.

The architecture, initialisation (Glorot-uniform weights, zero biases), loss (mean
softmax cross-entropy) and optimiser (SGD with momentum, ``v = m v - lr g; w += v``) are
those of the harness's tf_keras model (`cluster_sim.workloads.mlp` compiled with
``keras.optimizers.SGD(lr, momentum)``), so simulated and real runs train the same thing.

Example:

>>> import numpy as np
>>> model = MLP(num_features=4, num_classes=3, hidden=(5,), seed=0)
>>> x = np.ones((2, 6, 4), np.float32); y = np.zeros((2, 6), np.int64)
>>> model.gradients(model.params, x, y, np.full((2, 6), 1 / 6)).shape
(2, 43)
"""

import numpy as np


class MLP:
    """ReLU MLP with parameters in one flat vector (views per layer are cheap reshapes)."""

    def __init__(self, num_features: int, num_classes: int, hidden=(64, 64), seed: int = 0,
                 dtype=np.float32):
        sizes = [int(num_features), *map(int, hidden), int(num_classes)]
        if min(sizes) < 1:
            raise ValueError(f"layer sizes must be >= 1, got {sizes}")
        self.sizes = sizes
        self.dtype = np.dtype(dtype)
        self._slices = []  # (weight slice, weight shape, bias slice) per layer
        offset = 0
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            w = slice(offset, offset + fan_in * fan_out)
            offset += fan_in * fan_out
            self._slices.append((w, (fan_in, fan_out), slice(offset, offset + fan_out)))
            offset += fan_out
        self.num_params = offset
        rng = np.random.default_rng(seed)
        self.params = np.zeros(offset, self.dtype)
        for w, shape, _ in self._slices:
            limit = np.sqrt(6.0 / (shape[0] + shape[1]))  # Keras glorot_uniform
            self.params[w] = rng.uniform(-limit, limit, shape[0] * shape[1])
        self.velocity = np.zeros(offset, self.dtype)
        self._scratch = None  # `scratch`'s arrays

    @property
    def nbytes(self) -> int:
        """Bytes of one copy of the parameters (what a push or a pull moves)."""
        return self.num_params * self.dtype.itemsize

    def layers(self, params):
        return [(params[w].reshape(shape), params[b]) for w, shape, b in self._slices]

    def logits(self, params, x, out=None):
        """The network's outputs on ``x`` (rows), a new array; with ``out`` a list of one
        ``(rows, width)`` array per layer (`scratch`), written into those instead (what
        `evaluate` does: the same products, without allocating and faulting in fresh
        pages at every evaluation, which cost more than the products themselves)."""
        h = x
        layers = self.layers(params)
        for i, (w, b) in enumerate(layers):
            if out is None:
                h = h @ w
            else:
                h = np.matmul(h, w, out=out[i])
            h += b  # in place: the same sums as ``h @ w + b``
            if i < len(layers) - 1:
                np.maximum(h, 0, out=h)
        return h

    def scratch(self, rows: int) -> list:
        """`logits`'s per-layer output arrays for ``rows`` rows, kept for the next call
        with as many rows (an evaluation set is evaluated hundreds of times a run)."""
        if self._scratch is None or len(self._scratch[0]) != rows:
            self._scratch = [np.empty((rows, width), self.dtype) for width in self.sizes[1:]]
        return self._scratch

    def gradients(self, params, x, y, weights):
        """Per-worker gradients of the weighted cross-entropy, shape ``(workers, params)``.

        Args:
          params: flat parameter vector all these workers read (None: the model's own).
          x: ``(workers, batch, features)``; y: ``(workers, batch)`` integer labels.
          weights: ``(workers, batch)`` per-sample loss weights: ``1 / b_j`` for the
            ``b_j`` real samples of worker j (the mean loss of its mini-batch) and 0 for
            padding, so unequal batch sizes share one array.
        """
        m, b, f = x.shape
        grads = np.empty((m, self.num_params), self.dtype)
        self.backward(self.params if params is None else params, x.reshape(m * b, f), y,
                      weights, grads)
        return grads

    def backward(self, params, x, y, weights, grads, input_gradient: bool = False):
        """`gradients` on rows already flat: ``x`` is ``(workers * batch, features)``, the
        workers' batches one after the other, and ``grads`` (``(workers, params)``) is
        filled in place. With ``input_gradient`` it returns the gradient of the weighted
        loss with respect to ``x`` (what a layer below the MLP, e.g. embeddings, needs)."""
        m, rows = grads.shape[0], len(x)
        b = rows // m
        layers = self.layers(params)
        acts = [x]
        for i, (w, bias) in enumerate(layers):
            z = acts[-1] @ w + bias
            if i < len(layers) - 1:
                np.maximum(z, 0, out=z)
            acts.append(z)
        logits = acts.pop()
        logits -= logits.max(axis=1, keepdims=True)
        np.exp(logits, out=logits)
        logits /= logits.sum(axis=1, keepdims=True)
        delta = logits  # softmax - onehot, weighted per sample
        delta[np.arange(rows), y.reshape(-1)] -= 1.0
        delta *= weights.reshape(-1, 1).astype(self.dtype, copy=False)
        for i in range(len(layers) - 1, -1, -1):
            wsl, shape, bsl = self._slices[i]
            a = acts[i]
            d3 = delta.reshape(m, b, -1)
            grads[:, wsl] = np.matmul(a.reshape(m, b, -1).transpose(0, 2, 1), d3).reshape(m, -1)
            grads[:, bsl] = d3.sum(axis=1)
            if i or input_gradient:
                delta = delta @ layers[i][0].T
            if i:
                delta *= a > 0  # ReLU derivative (a is the post-ReLU activation)
        return delta if input_gradient else None

    def apply(self, gradient, learning_rate: float, momentum: float) -> None:
        """One SGD-with-momentum step (Keras semantics) on the model's own parameters."""
        self.velocity *= momentum
        self.velocity -= learning_rate * gradient
        self.params += self.velocity

    def evaluate(self, x, y):
        """(mean cross-entropy, accuracy) of the current parameters on ``x``, ``y``.

        In float64 after the float32 network. Only the label's log-probability is
        formed (``logits[y] - log(sum(exp(logits)))``, the very operations of the whole
        log-softmax, on the elements the loss reads), and the row maximum is taken column
        by column (a maximum is exact in any order): the same floats as the whole
        log-softmax, in half its time on the few-class outputs here."""
        logits = self.logits(self.params, x, out=self.scratch(len(x))).astype(np.float64)
        top = logits[:, 0].copy()
        for j in range(1, logits.shape[1]):
            np.maximum(top, logits[:, j], out=top)
        logits -= top[:, None]
        label = logits[np.arange(len(y)), y]
        label -= np.log(np.exp(logits).sum(axis=1))
        return -float(label.mean()), float((logits.argmax(axis=1) == y).mean())
