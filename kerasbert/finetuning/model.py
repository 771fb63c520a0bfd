"""One shared BERT encoder, three task heads, and a multitask training step.

Heads:
- sentiment: dropout + dense(5) on the sentence embedding.
- paraphrase: cross-encoder: dense(1) on the pair's embedding; bi-encoder: dense(1)
  on [u, v, |u - v|, u * v] of the two sentence embeddings (Sentence-BERT).
- similarity: cross-encoder: 5 * sigmoid(dense(1)); bi-encoder: the cosine of u
  and v mapped from [-1, 1] to [0, 5].
The paraphrase head uses `pair_encoder`; the similarity head `sts_encoder` (default: the
same), so paraphrase can read both sentences at once while similarity stays a cosine.
The sentence embedding (`embed`) is the mean of the token states over the padding
mask (what MiniLM was trained with) or the `[CLS]` pooler.

Each batch holds one task (see finetuning/data.py); `train_step` switches on it, so a
step runs the encoder only for that task's inputs. Losses: cross-entropy (sst),
binary cross-entropy plus optional multiple-negatives ranking on positives (para),
MSE on the score or cosine-embedding loss (sts), weighted per task.

Example:
    >>> model = MultitaskBert(backbone, pair_encoder="bi")
    >>> model.compile(optimizer=keras.optimizers.AdamW(5e-5))
    >>> model.fit(interleaved_batches, steps_per_epoch=100, epochs=6)
"""

from __future__ import annotations

import keras
import tensorflow as tf

from kerasbert.models.encoder import bert_initializer
from kerasbert.packing import ENCODER_KEYS

TASKS = ("sst", "para", "sts")


def cosine(u, v):
    """Row-wise cosine similarity of two (batch, hidden) tensors."""
    return tf.reduce_sum(tf.math.l2_normalize(u, -1) * tf.math.l2_normalize(v, -1), -1)


def second_inputs(x: dict) -> dict:
    """The `_b` fields of a batch (sentence b for a bi-encoder) under the encoder's names."""
    return {k: x[f"{k}_b"] for k in ENCODER_KEYS}


@keras.saving.register_keras_serializable(package="kerasbert")
class MultitaskBert(keras.Model):
    """One shared encoder with sentiment (5 classes), paraphrase (binary) and similarity
    (0-5) heads; each training batch holds one task (`task_dataset`, `interleave_tasks`).

    Args:
        backbone: a keras-hub `BertBackbone`.
        pair_encoder: "cross" (a pair packed as one sequence) or "bi" (Sentence-BERT).
        sts_encoder: the similarity head's own cross/bi choice (None: `pair_encoder`).
        pooling: sentence embedding from the "mean" of token states or the "cls" pooler.
        task_weights: loss weights of (sst, para, sts).

    Example:
        >>> model = MultitaskBert(load_encoder(minilm_checkpoint()))
        >>> model.compile(optimizer=keras.optimizers.AdamW(5e-5))
        >>> model.fit(task_dataset("sst", examples, preprocessor, 32, training=True), steps_per_epoch=100)
    """

    def __init__(self, backbone, pair_encoder="cross", sts_encoder=None, pooling="mean", dropout=0.1,
                 sts_loss="mse", para_mnrl_weight=0.0, mnrl_scale=20.0,
                 task_weights=(1.0, 1.0, 1.0), layerwise_lr_decay=1.0, hold_idle_heads=False,
                 **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.pair_encoder = pair_encoder
        self.sts_encoder = sts_encoder or pair_encoder
        self.pooling = pooling
        self.dropout_rate = dropout
        self.sts_loss = sts_loss
        self.para_mnrl_weight = para_mnrl_weight
        self.mnrl_scale = mnrl_scale
        self.task_weights = tuple(task_weights)
        self.layerwise_lr_decay = layerwise_lr_decay
        self.hold_idle_heads = hold_idle_heads
        init = bert_initializer()
        self.dropout = keras.layers.Dropout(dropout, name="head_dropout")
        self.sentiment_head = keras.layers.Dense(5, kernel_initializer=init, name="sentiment_head")
        self.paraphrase_head = keras.layers.Dense(1, kernel_initializer=init, name="paraphrase_head")
        self.similarity_head = keras.layers.Dense(1, kernel_initializer=init, name="similarity_head")
        self.task_losses = {t: keras.metrics.Mean(name=f"{t}_loss") for t in TASKS}
        self.total_loss = keras.metrics.Mean(name="loss")

    # --- Forward paths, one per task -------------------------------------------------

    def embed(self, x, training=False):
        """Sentence embedding (batch, hidden)."""
        out = self.backbone({k: x[k] for k in ENCODER_KEYS}, training=training)
        if self.pooling == "cls":
            return out["pooled_output"]
        mask = tf.cast(x["padding_mask"], out["sequence_output"].dtype)[..., None]  # (batch, seq, 1)
        summed = tf.reduce_sum(out["sequence_output"] * mask, axis=1)  # (batch, hidden)
        return summed / tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)

    def sentiment_logits(self, x, training=False):
        return self.sentiment_logits_from(self.embed(x, training), training)  # (batch, 5)

    def _pair_embeddings(self, x, training):
        return self.embed(x, training), self.embed(second_inputs(x), training)

    def paraphrase_logit(self, x, training=False):
        if self.pair_encoder == "cross":
            return self.paraphrase_logit_from(self.embed(x, training), training=training)
        return self.paraphrase_logit_from(*self._pair_embeddings(x, training), training=training)

    def similarity_cosine(self, x, training=False):
        return cosine(*self._pair_embeddings(x, training))

    def similarity_score(self, x, training=False):
        """Predicted similarity in [0, 5]."""
        if self.sts_encoder == "cross":
            return self.similarity_score_from(self.embed(x, training), training=training)
        return self.similarity_score_from(*self._pair_embeddings(x, training), training=training)

    # --- Heads on sentence embeddings: u is the pair's (cross) or sentence a's, v sentence b's ---

    def sentiment_logits_from(self, u, training=False):
        return self.sentiment_head(self.dropout(u, training=training))

    def paraphrase_logit_from(self, u, v=None, training=False):
        features = u if v is None else tf.concat([u, v, tf.abs(u - v), u * v], axis=-1)  # (batch, 4 * hidden)
        return self.paraphrase_head(self.dropout(features, training=training))[:, 0]  # (batch,)

    def similarity_score_from(self, u, v=None, training=False):
        if v is None:
            return 5.0 * tf.sigmoid(self.similarity_head(self.dropout(u, training=training))[:, 0])
        return 2.5 * (cosine(u, v) + 1.0)

    # --- What each head answers: probabilities (sst), a probability (para), a score (sts) ---

    def task_prediction(self, task: str, x):
        """sst: class probabilities (batch, 5); para: probability of a paraphrase (batch,);
        sts: similarity in [0, 5] (batch,). What evaluation scores and the export serves."""
        if task == "sst":
            return tf.nn.softmax(self.sentiment_logits(x))
        if task == "para":
            return tf.sigmoid(self.paraphrase_logit(x))
        return tf.clip_by_value(self.similarity_score(x), 0.0, 5.0)

    def task_prediction_from(self, task: str, u, v=None):
        """`task_prediction` from sentence embeddings: u of the pair (cross) or of sentence a, v of b."""
        if task == "sst":
            return tf.nn.softmax(self.sentiment_logits_from(u))
        if task == "para":
            return tf.sigmoid(self.paraphrase_logit_from(u, v))
        return tf.clip_by_value(self.similarity_score_from(u, v), 0.0, 5.0)

    def call(self, x, training=False):
        return {"sentiment": self.sentiment_logits(x, training),
                "paraphrase": self.paraphrase_logit(x, training),
                "similarity": self.similarity_score(x, training)}

    # --- Losses and the multitask step -----------------------------------------------

    def _sst_loss(self, x, y):
        logits = self.sentiment_logits(x, training=True)
        return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
            tf.cast(y, tf.int32), logits, from_logits=True))

    def _para_loss(self, x, y):
        loss = tf.reduce_mean(keras.losses.binary_crossentropy(
            y[:, None], self.paraphrase_logit(x, training=True)[:, None], from_logits=True))
        if self.para_mnrl_weight:
            # Multiple negatives ranking: each positive's b must outscore the other b's.
            u, v = self._pair_embeddings(x, True)
            scores = self.mnrl_scale * tf.matmul(tf.math.l2_normalize(u, -1),
                                                 tf.math.l2_normalize(v, -1), transpose_b=True)
            ranking = keras.losses.sparse_categorical_crossentropy(
                tf.range(tf.shape(y)[0]), scores, from_logits=True)  # (batch,)
            positives = tf.cast(y > 0.5, ranking.dtype)
            loss += self.para_mnrl_weight * tf.math.divide_no_nan(
                tf.reduce_sum(ranking * positives), tf.reduce_sum(positives))
        return loss

    def _sts_loss(self, x, y):
        if self.sts_loss == "cosine":  # cosine embedding loss: cos(u, v) regressed to y / 5
            return tf.reduce_mean(tf.square(self.similarity_cosine(x, True) - y / 5.0))
        return tf.reduce_mean(tf.square(self.similarity_score(x, training=True) - y))

    def _update_scales(self, task):
        """Per trainable variable: the share of the optimizer's update it keeps this step.

        Layer-wise learning-rate decay gives layer i of L the constant
        `layerwise_lr_decay ** (L + 1 - depth)` (embeddings depth 0; heads and pooler the full
        rate). With `hold_idle_heads`, a task head keeps 0 of the update on other tasks'
        batches: it gets no gradient there, but Adam's momentum and the weight decay would
        still move it (PyTorch's AdamW skips such parameters; here their Adam moments still
        decay). Returns None for variables that keep the whole update.
        """
        num_layers = self.backbone.num_layers
        heads = (self.sentiment_head, self.paraphrase_head, self.similarity_head)  # TASKS order
        owners = {v.path: task for task, head in enumerate(heads) for v in head.trainable_variables}
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
                scale = scale * tf.cast(task == owner, variable.dtype)
            scales.append(None if isinstance(scale, float) and scale == 1.0 else scale)
        return scales

    def train_step(self, data):
        x, y = data
        task = x["task"][0]
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        branches = [self._sst_loss, self._para_loss, self._sts_loss]
        with tf.GradientTape() as tape:
            loss = tf.switch_case(task, [
                (lambda f=f, w=w: w * f(x, y)) for f, w in zip(branches, self.task_weights)])
            scaled = loss / replicas  # gradients are summed across replicas
        variables = self.trainable_variables
        gradients = tape.gradient(scaled, variables)
        gradients = [tf.zeros_like(v) if g is None else g for v, g in zip(variables, gradients)]
        scales = self._update_scales(task)
        before = [None if s is None else tf.identity(v) for v, s in zip(variables, scales)]
        self.optimizer.apply(gradients, variables)
        for variable, old, scale in zip(variables, before, scales):
            if scale is not None:  # keep `scale` of this step's update
                variable.assign(old + scale * (variable - old))
        for index, name in enumerate(TASKS):
            self.task_losses[name].update_state(loss, sample_weight=tf.cast(task == index, loss.dtype))
        self.total_loss.update_state(loss)
        return {m.name: m.result() for m in self.metrics}

    @property
    def metrics(self):
        return [self.total_loss, *self.task_losses.values()]

    def get_config(self):
        return {
            "backbone": keras.layers.serialize(self.backbone), "pair_encoder": self.pair_encoder,
            "sts_encoder": self.sts_encoder,
            "pooling": self.pooling, "dropout": self.dropout_rate, "sts_loss": self.sts_loss,
            "para_mnrl_weight": self.para_mnrl_weight, "mnrl_scale": self.mnrl_scale,
            "task_weights": list(self.task_weights), "layerwise_lr_decay": self.layerwise_lr_decay,
            "hold_idle_heads": self.hold_idle_heads, "name": self.name,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.layers.deserialize(config["backbone"])
        return cls(**config)
