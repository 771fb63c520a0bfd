"""One shared BERT encoder, a head per task, and a multitask training step.

Heads, by the task's kind, each its family's (kerasbert/families/: `Family.head_output`, `loss`):
- classes (sentiment): dropout + dense(num_classes) on the sentence embedding.
- pair_classes, pair_binary (paraphrase): cross-encoder: dense(num_classes), or dense(1) for
  binary, on the pair's embedding; bi-encoder: the same on [u, v, |u - v|, u * v] of the
  two sentence embeddings (Sentence-BERT).
- score: min_score + (max_score - min_score) * sigmoid(dense(1)) on the sentence embedding;
  with the task's score_output "linear", dense(1) itself (transformers' regression head).
- pair_score (similarity): cross-encoder: as score, on the pair's embedding; bi-encoder: the
  cosine of u and v mapped from [-1, 1] to [min_score, max_score].
- tags (named entities): dropout + dense(num_tags) on each token's state: tag logits
  (batch, seq, tags); a word's tag is its first piece's (kerasbert/families/tagging/features.py).
- span (extractive QA): dense(2) on each token's state: start and end logits (batch, seq, 2)
  (kerasbert/families/span_qa/features.py).
Pair heads use `pair_encoder`, a pair_score task its own `encoder` if it sets one, so
paraphrase can read both sentences at once while similarity stays a cosine.
The sentence embedding (`embed`) is the mean of the token states over the padding
mask (what MiniLM was trained with) or the `[CLS]` pooler. With `unpadded` (the default
where kerasbert/compat/ allows it), the encoder runs over the real tokens only
(kerasbert/models/unpadded.py): the same outputs and gradients, without the padding's
share of the work; XLA (`jit_compile`) needs the padded one.

Each batch holds one task (see finetuning/data.py); `train_step` switches on it, so a
step runs the encoder only for that task's inputs. Losses: cross-entropy (classes,
pair_classes), binary cross-entropy plus optional multiple-negatives ranking on positives
(pair_binary), MSE on the score or cosine-embedding loss (pair_score), the families'
`masked_tag_loss` (tags) and `span_loss` (span), weighted per task.

Example (`tokenizer`: a 15-token vocabulary; a 1-layer random encoder, 2 steps):
    >>> from kerasbert.config import ModelConfig
    >>> from kerasbert.finetuning.data import Example, TaskPreprocessor, interleave_tasks, task_dataset
    >>> from kerasbert.models.encoder import build_encoder
    >>> backbone = build_encoder(ModelConfig(preset="custom", num_layers=1, hidden_dim=8, num_heads=2), 15)
    >>> pre = TaskPreprocessor(tokenizer, sequence_length=16, pair_encoder="bi")
    >>> sst = task_dataset("sst", [Example("the cat sat", "", 4), Example("dogs ran", "", 0)], pre, 2, True)
    >>> sts = task_dataset("sts", [Example("the cat sat", "a cat sat", 4.5), Example("dogs ran", "the mat", 0.5)],
    ...                    pre, 2, True)
    >>> interleaved_batches = interleave_tasks({"sst": sst, "sts": sts}, {"sst": 2, "sts": 2}, "temperature", 2.0)
    >>> model = MultitaskBert(backbone, tasks=("sst", "sts"), pair_encoder="bi")
    >>> model.compile(optimizer=keras.optimizers.AdamW(5e-5))
    >>> history = model.fit(interleaved_batches, steps_per_epoch=2, verbose=0)
    >>> sorted(history.history)  # the weighted total and each task's loss
    ['loss', 'sst_loss', 'sts_loss']
"""

from __future__ import annotations

import keras
import tensorflow as tf

from kerasbert.models import unpadded as unpadded_encoder
from kerasbert.models.dataset_fit import DatasetFit
from kerasbert.models.encoder import bert_initializer
from kerasbert.packing import ENCODER_KEYS, stack_sides
from kerasbert.tasks import DEFAULT_TASKS, HEADS_BEFORE, Task, declare_tasks, encoder_of, task_id, upgrade_heads


STEP_EMBEDDING = "step_embedding"  # a training batch's sentence embedding, computed once by train_step


def second_inputs(x: dict) -> dict:
    """The `_b` fields of a batch (sentence b for a bi-encoder) under the encoder's names."""
    return {k: x[f"{k}_b"] for k in ENCODER_KEYS}


@keras.saving.register_keras_serializable(package="kerasbert")
class MultitaskBert(DatasetFit, keras.Model):
    """One shared encoder with a head per task (by default sentiment (5 classes),
    paraphrase (binary) and similarity (0-5)); each training batch holds one task
    (`task_dataset`, `interleave_tasks`).

    Args:
        backbone: a keras-hub `BertBackbone`.
        tasks: the tasks, one head each: `kerasbert.Task`s (their classes known), names of
            shipped tasks (`kerasbert.task_names()`), or their configs.
        pair_encoder: "cross" (a pair packed as one sequence) or "bi" (Sentence-BERT); a
            pair_score task may set its own (its `encoder`).
        pooling: sentence embedding from the "mean" of token states or the "cls" pooler.
        unpadded: run the encoder over the real tokens only (None: where available).
        task_weights: loss weight of each task, in the order of `tasks` (None: all 1).

    Example:
        >>> from kerasbert.finetuning.data import TaskPreprocessor
        >>> from kerasbert.models.encoder import build_encoder
        >>> model = MultitaskBert(build_encoder("tiny", vocabulary_size=15))  # or load_encoder(minilm_checkpoint())
        >>> pre = TaskPreprocessor(tokenizer, 16, "cross")
        >>> x = pre("sts", tf.constant(["the cat sat", "dogs ran"]), tf.constant(["a cat sat", "the mat"]))
        >>> model.head_output("sts", x).shape  # 2 scores in [0, 5]; model.fit(task_dataset(...)) trains them
        TensorShape([2])
    """

    def __init__(self, backbone, pair_encoder="cross", pooling="mean", dropout=0.1,
                 task_weights=None, layerwise_lr_decay=1.0, hold_idle_heads=False,
                 tasks=DEFAULT_TASKS, unpadded=None, **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.task_specs = declare_tasks([Task.from_config(task["name"], task) if isinstance(task, dict) else task
                                         for task in tasks])
        unresolved = [name for name, task in self.task_specs.items() if not task.is_resolved]
        if unresolved:
            raise ValueError(f"Task(s) {unresolved} have no classes (or score range) yet: take them from the "
                             "training file first (kerasbert.data.task_files.read_training_file)")
        self.tasks = tuple(self.task_specs)
        self.pair_encoder = pair_encoder
        self.pooling = pooling
        self.dropout_rate = dropout
        self.task_weights = tuple(task_weights) if task_weights is not None else (1.0,) * len(self.tasks)
        if len(self.task_weights) != len(self.tasks):
            raise ValueError(f"task_weights needs one weight per task {self.tasks}. Received: {task_weights}")
        self.layerwise_lr_decay = layerwise_lr_decay
        self.hold_idle_heads = hold_idle_heads
        self.unpadded = unpadded_encoder.available() if unpadded is None else bool(unpadded)
        init = bert_initializer()
        self.dropout = keras.layers.Dropout(dropout, name="head_dropout")
        for task in self.task_specs.values():  # attributes named by the head: `sentiment_head`, ...
            units = task.family.head_units(task)  # span: start and end; binary and score kinds: one
            setattr(self, f"{task.head}_head", keras.layers.Dense(units, kernel_initializer=init,
                                                                  name=f"{task.head}_head"))
        self.task_losses = {name: keras.metrics.Mean(name=f"{name}_loss") for name in self.tasks}
        self.total_loss = keras.metrics.Mean(name="loss")

    def head(self, task: str) -> keras.layers.Layer:
        """The head layer of `task`."""
        if task not in self.tasks:
            raise ValueError(f"This model has no head for task {task!r}; its tasks: {self.tasks}")
        return getattr(self, f"{self.task_specs[task].head}_head")

    def build(self, input_shape=None):
        """Builds every head that has weights (Keras calls this when it loads a saved model)."""
        hidden = self.backbone.hidden_dim
        for name in self.tasks:
            shape = self.task_specs[name].family.head_input_shape(self, name, hidden)
            if shape is not None and not self.head(name).built:  # None: a bi-encoder cosine, never called
                self.head(name).build(shape)
        self.built = True

    def compile(self, *args, **kwargs):
        """keras' compile, the heads built first: one left to build inside fit's traced step
        would see a hidden size of None (a token head, as `model.fit` alone on a tags task)."""
        if not self.built:
            self.build()
        super().compile(*args, **kwargs)

    def encoder_of(self, task: str) -> str:
        """"cross" or "bi" for a pair task; "" for a one-text task."""
        return encoder_of(self.task_specs[task], self.pair_encoder)

    # --- Forward paths ----------------------------------------------------------------

    def embed(self, x, training=False, unpadded=None, compute_dtype=None):
        """Sentence embedding (batch, hidden); `unpadded` overrides the model's choice;
        `compute_dtype` (unpadded only): the backbone's `Bfloat16Weights` or `Int8Weights`
        (kerasbert/quantize.py `serving_precision`), whose products the encoder runs."""
        inputs = {k: x[k] for k in ENCODER_KEYS}
        # Keras builds a model by calling it on symbolic tensors, which only the backbone's own
        # call takes; the output shapes are the same.
        symbolic = isinstance(inputs["padding_mask"], keras.KerasTensor)
        if (self.unpadded if unpadded is None else unpadded) and unpadded_encoder.available() and not symbolic:
            return unpadded_encoder.sentence_embedding(self.backbone, inputs, self.pooling, training, compute_dtype)
        if compute_dtype is not None:
            raise ValueError(f"compute_dtype={compute_dtype!r} needs the unpadded encoder, which this "
                             "Keras / keras-hub release does not have (kerasbert/compat/)")
        out = self.backbone(inputs, training=training)
        if self.pooling == "cls":
            return out["pooled_output"]
        mask = tf.cast(x["padding_mask"], out["sequence_output"].dtype)[..., None]  # (batch, seq, 1)
        summed = tf.reduce_sum(out["sequence_output"] * mask, axis=1)  # (batch, hidden)
        return summed / tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)

    def sequence(self, x, training=False):
        """Each token's state (batch, seq, hidden): what the tags and span heads read. With
        `unpadded`, the real tokens' states as the backbone gives them and zeros at padding
        (which no loss or decoder reads)."""
        inputs = {k: x[k] for k in ENCODER_KEYS}
        if self.unpadded and unpadded_encoder.available() and not isinstance(inputs["padding_mask"], keras.KerasTensor):
            states, tokens = unpadded_encoder.encode_tokens(self.backbone, inputs, training)
            return tokens.scatter(states)
        return self.backbone(inputs, training=training)["sequence_output"]

    def pair_embeddings(self, x, training):
        """(u, v) of a bi-encoder pair's sentences a and b, from one encoder call over both:
        b's rows after a's, each side padded to the wider side's width."""
        a, b = {k: x[k] for k in ENCODER_KEYS}, second_inputs(x)
        if isinstance(a["padding_mask"], keras.KerasTensor):  # Keras building the model: shapes only
            return self.embed(a, training), self.embed(b, training)
        both, sizes = stack_sides(a, b)
        return tuple(tf.split(self.embed(both, training), sizes))

    def task_embeddings(self, task: str, x, training=False):
        """(u, v): u of the text or the packed pair, v None; for a bi-encoder pair, u of
        sentence a and v of sentence b. A batch that carries its `STEP_EMBEDDING` gives that as u."""
        if self.encoder_of(task) == "bi":
            return self.pair_embeddings(x, training)
        if STEP_EMBEDDING in x:
            return x[STEP_EMBEDDING], None
        return self.embed(x, training), None

    @property
    def embeds_once(self) -> bool:
        """Whether every task's head reads the same encoder call, the sentence embedding of the
        batch's one sequence (pooled families, no bi-encoder pair): then `train_step` runs the
        encoder once, before it switches on the task, rather than once in each task's branch,
        which cuts the first step's tracing (the encoder and its gradient traced once, not once
        per task) and nothing of the results."""
        return all(spec.family.pooled and self.encoder_of(name) != "bi" for name, spec in self.task_specs.items())

    def head_output(self, task: str, x, training=False):
        """classes kinds: logits (batch, n); pair_binary: a logit (batch,); score kinds: the score
        (batch,); tags: tag logits (batch, seq, tags); span: start and end logits (batch, seq, 2)."""
        return self.task_specs[task].family.head_output(self, task, x, training)

    def head_output_from(self, task: str, u, v=None, training=False):
        """`head_output` of a sentence task from sentence embeddings: u of the text or pair, v of
        sentence b (bi)."""
        return self.task_specs[task].family.head_output_from(self, task, u, v, training)

    # --- What each head answers: probabilities, a probability, a score ----------------

    def task_prediction(self, task: str, x):
        """classes, pair_classes: class probabilities (batch, n); pair_binary: the probability
        of the second class (batch,); score kinds: the score in [min_score, max_score]
        (batch,). What evaluation scores and the export serves. The token-level families answer
        through their decoders (kerasbert/families/*/export.py), which read `head_output`'s logits."""
        return self.task_specs[task].family.batch_prediction(self, task, x)

    def task_prediction_from(self, task: str, u, v=None):
        """`task_prediction` from sentence embeddings: u of the pair (cross) or of sentence a, v of b."""
        return self.task_specs[task].family.prediction(self, task, u, v)

    def call(self, x, training=False):
        return {spec.head: self.head_output(name, x, training) for name, spec in self.task_specs.items()}

    # --- Losses and the multitask step -----------------------------------------------

    def task_loss(self, task: str, x, y):
        """The training loss of one task's batch (its family's loss, see the module doc). `y`'s
        shape may be unknown (the interleaved stream's): each family gives its own back."""
        return self.task_specs[task].family.loss(self, task, x, y)

    def _update_scales(self, position):
        """Per trainable variable: the share of the optimizer's update it keeps this step.

        Layer-wise learning-rate decay gives layer i of L the constant
        `layerwise_lr_decay ** (L + 1 - depth)` (embeddings depth 0; heads and pooler the full
        rate). With `hold_idle_heads`, a task head keeps 0 of the update on other tasks'
        batches: it gets no gradient there, but Adam's momentum and the weight decay would
        still move it (PyTorch's AdamW skips such parameters; here their Adam moments still
        decay). Returns None for variables that keep the whole update.
        """
        num_layers = self.backbone.num_layers
        owners = {v.path: index for index, name in enumerate(self.tasks) for v in self.head(name).trainable_variables}
        scales = []
        for variable in self.trainable_variables:
            path = variable.path
            depth = num_layers + 1  # heads and pooler: full rate
            for i in range(num_layers):
                if f"transformer_layer_{i}/" in path:
                    depth = i + 1
            if "embedding" in path:
                depth = 0
            scale = self.layerwise_lr_decay ** (num_layers + 1 - depth)
            owner = owners.get(path)
            if self.hold_idle_heads and owner is not None:
                scale = scale * tf.cast(position == owner, variable.dtype)
            scales.append(None if isinstance(scale, float) and scale == 1.0 else scale)
        return scales

    @tf.autograph.experimental.do_not_convert  # no tensor-dependent Python control flow: tracing skips converting
    def train_step(self, data):
        x, y = data
        task = x["task"][0]  # the batch's task, by its id (kerasbert.tasks.task_id)
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        # The position of the batch's task in self.tasks (-1: not one of them).
        matches = tf.equal(tf.constant([task_id(name) for name in self.tasks], tf.int32), task)
        position = tf.where(tf.reduce_any(matches), tf.argmax(tf.cast(matches, tf.int32), output_type=tf.int32), -1)
        with tf.GradientTape() as tape:
            if self.embeds_once:
                x = {**x, STEP_EMBEDDING: self.embed(x, training=True)}
            loss = tf.switch_case(position, [
                (lambda name=name, w=w: w * self.task_loss(name, x, y))
                for name, w in zip(self.tasks, self.task_weights)], default=self._unknown_task(task))
            scaled = loss / replicas  # gradients are summed across replicas
        variables = self.trainable_variables
        gradients = tape.gradient(scaled, variables)
        gradients = [tf.zeros_like(v) if g is None else g for v, g in zip(variables, gradients)]
        scales = self._update_scales(position)
        before = [None if s is None else tf.identity(v) for v, s in zip(variables, scales)]
        self.optimizer.apply(gradients, variables)
        for variable, old, scale in zip(variables, before, scales):
            if scale is not None:  # keep `scale` of this step's update
                variable.assign(old + scale * (variable - old))
        for index, name in enumerate(self.tasks):
            self.task_losses[name].update_state(loss, sample_weight=tf.cast(position == index, loss.dtype))
        self.total_loss.update_state(loss)
        return {m.name: m.result() for m in self.metrics}

    def _unknown_task(self, task):
        def fail():
            check = tf.debugging.Assert(False, ["a batch of a task this model has no head for:", task])
            with tf.control_dependencies([check]):
                return tf.constant(0.0)
        return fail

    @property
    def metrics(self):
        return [self.total_loss, *self.task_losses.values()]

    def get_config(self):
        return {
            "backbone": keras.layers.serialize(self.backbone), "pair_encoder": self.pair_encoder,
            "pooling": self.pooling, "dropout": self.dropout_rate,
            "task_weights": list(self.task_weights), "layerwise_lr_decay": self.layerwise_lr_decay,
            "hold_idle_heads": self.hold_idle_heads, "unpadded": self.unpadded,
            "tasks": [task.to_config() for task in self.task_specs.values()],
            "name": self.name,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.layers.deserialize(config["backbone"])
        # A model.keras of before issue 86: the sentence settings it held, its tasks' now.
        old = {key: config.pop(key) for key in HEADS_BEFORE if key in config}
        if old:
            if old.get("sts_encoder") == config.get("pair_encoder", "cross"):
                old.pop("sts_encoder")  # written as its pair_encoder when it had none of its own
            config["tasks"] = list(upgrade_heads(
                [Task.from_config(task["name"], task) for task in config.get("tasks", DEFAULT_TASKS)], old).values())
        return cls(**config)
