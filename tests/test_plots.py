"""The run's figures are readable: titles inside the figure, and a training curve with more
than one point a block."""

import csv

import keras
import matplotlib.figure
import numpy as np
import pytest
import tensorflow as tf

from kerasbert.plots import plot_confusion, plot_curves
from kerasbert.training.callbacks import HistoryCSV
from kerasbert.training.step_curve import StepCurve

CLASSES = ["very negative", "negative", "neutral", "positive", "very positive"]


@pytest.fixture
def saved_figures(monkeypatch):
    """The figures plot functions save, drawn, instead of PNG files."""
    figures = []

    def keep(fig, *args, **kwargs):
        fig.canvas.draw()
        figures.append(fig)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    return figures


def test_the_confusion_matrix_title_stays_inside_the_figure(saved_figures, tmp_path):
    title = "SST-5: 1101 dev examples that chose step 450 (accuracy 0.512)"  # the demo's
    plot_confusion([0, 1, 2, 3, 4], [0, 1, 2, 4, 4], CLASSES, str(tmp_path / "c.png"), title)
    (fig,) = saved_figures
    width = fig.get_window_extent().width
    texts = [t for t in fig.findobj(matplotlib.text.Text) if t.get_text() and t.get_visible()]
    assert " ".join(t.get_text() for t in texts).count("accuracy 0.512") == 1
    for text in texts:
        box = text.get_window_extent()
        assert box.x0 >= 0 and box.x1 <= width, (text.get_text(), box, width)


def test_the_training_curve_has_ten_points_a_block_of_window_means(tmp_path, saved_figures):
    class RunningMeans(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.block = []
            blocks.append(self.block)

        def on_train_batch_end(self, batch, logs=None):
            self.block.append(logs["loss"])

    blocks = []
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    x = np.random.default_rng(0).normal(size=(40 * 4, 3)).astype("float32")
    steps_per_block = 20
    model.fit(x, x.sum(-1, keepdims=True), batch_size=4, epochs=2, steps_per_epoch=steps_per_block, shuffle=False,
              verbose=0, callbacks=[RunningMeans(), HistoryCSV(str(tmp_path / "history.csv")),
                                    StepCurve(str(tmp_path / "steps.csv"), steps_per_block, every=2)])
    with open(tmp_path / "steps.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == list(range(2, 41, 2))
    # Each row: the mean loss of its two steps, from Keras' running means of the block.
    losses = [b * m - (b - 1) * (block[b - 2] if b > 1 else 0) for block in blocks
              for b, m in enumerate(block, start=1)]
    np.testing.assert_allclose([float(r["loss"]) for r in rows], np.mean(np.reshape(losses, (-1, 2)), 1),
                               rtol=1e-4)

    plot_curves(str(tmp_path / "history.csv"), str(tmp_path / "curves.png"), "toy", steps_per_block)
    loss_ax = saved_figures[0].axes[0]
    assert [len(line.get_xdata()) for line in loss_ax.lines] == [20]


def test_a_tasks_curve_averages_only_the_steps_of_that_task(tmp_path, saved_figures):
    """A multitask run's `<task>_loss` is a Mean weighted 0 on the other tasks' steps
    (MultitaskBert.train_step): its window is its own steps' mean, or empty without any."""

    class TwoTasks(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1)
            self.step = keras.Variable(0.0, trainable=False)
            self.losses_of = {name: keras.metrics.Mean(name=f"{name}_loss") for name in ("a", "b")}

        def call(self, x):
            return self.dense(x)

        def train_step(self, data):
            self.step.assign_add(1.0)
            step = self.step.value
            is_a = tf.cast(step <= 2, tf.float32)  # steps 1-2: task a (losses 1, 2); 3-6: task b (3 .. 6)
            self.losses_of["a"].update_state(step, sample_weight=is_a)
            self.losses_of["b"].update_state(step, sample_weight=1.0 - is_a)
            return {m.name: m.result() for m in self.metrics}

        @property
        def metrics(self):
            return list(self.losses_of.values())

    model = TwoTasks()
    model.compile(optimizer="sgd")
    data = tf.data.Dataset.from_tensors((tf.ones([1, 3]), tf.ones([1, 1]))).repeat()
    model.fit(data, epochs=1, steps_per_epoch=6, verbose=0,
              callbacks=[StepCurve(str(tmp_path / "steps.csv"), 6, every=2), HistoryCSV(str(tmp_path / "history.csv"))])
    with open(tmp_path / "steps.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(row["step"], row["a_loss"], row["b_loss"]) for row in rows] == [
        ("2", "1.5", ""), ("4", "", "3.5"), ("6", "", "5.5")]
    plot_curves(str(tmp_path / "history.csv"), str(tmp_path / "curves.png"), "two tasks", 6)
    lines = {line.get_label(): line.get_xydata().tolist() for line in saved_figures[0].axes[0].lines}
    assert lines == {"a_loss": [[2, 1.5]], "b_loss": [[4, 3.5], [6, 5.5]]}  # windows without the task left out
