"""BERT pretraining model: encoder + masked-LM head (tied) + next-sentence head.

A functional Keras model in keras-hub's Backbone -> Head -> Task shape. Its config
stores the encoder, and `from_config` rebuilds the heads around it, so the MLM
head's output projection stays *tied* to the encoder's token embedding after a
`.keras` round trip (a plain functional model would deserialise a copy).

Inputs: token_ids, segment_ids, padding_mask (batch, seq); mask_positions (batch, K).
Outputs: {"mlm": logits (batch, K, vocab), "nsp": logits (batch, 2)}; float32 even
under mixed precision, so the losses are computed in full precision.

Example (`tokenizer`: a 15-token vocabulary; `corpus_file`: a few documents of its words):
    >>> from kerasbert.config import ModelConfig
    >>> from kerasbert.models.encoder import build_encoder
    >>> from kerasbert.pretraining.inputs import text_pretraining_dataset
    >>> backbone = build_encoder(ModelConfig(preset="custom", num_layers=1, hidden_dim=8, num_heads=2), 15)
    >>> model = BertPretrainer(backbone, mask_selection_length=20)
    >>> model.compile(**pretraining_compile_args(model, keras.optimizers.AdamW(1e-3)))
    >>> dataset = text_pretraining_dataset([corpus_file], tokenizer, sequence_length=32, batch_size=8)
    >>> history = model.fit(dataset, steps_per_epoch=2, verbose=0)
    >>> history.history["mlm_loss"][0] > 0
    True
"""

from __future__ import annotations

import keras
import keras_hub

from kerasbert.models.dataset_fit import DatasetFit
from kerasbert.models.encoder import bert_initializer
from kerasbert.packing import ENCODER_KEYS


@keras.saving.register_keras_serializable(package="kerasbert")
class BertPretrainer(DatasetFit, keras.Model):
    """A BERT encoder with a masked-LM head (tied to the token embedding) and, with `nsp`,
    a next-sentence head on the pooled output.

    Args:
        backbone: a keras-hub `BertBackbone` (`build_encoder` or `load_encoder`).
        mask_selection_length: masked positions predicted per sequence (K).
        nsp: add the next-sentence head and its `nsp` output.

    Example:
        >>> import numpy as np
        >>> from kerasbert.models.encoder import build_encoder
        >>> model = BertPretrainer(build_encoder("tiny", vocabulary_size=15), mask_selection_length=2)
        >>> x = {"token_ids": np.array([[2, 6, 4, 3, 0]]), "segment_ids": np.zeros((1, 5), "int32"),
        ...      "padding_mask": np.array([[1, 1, 1, 1, 0]]), "mask_positions": np.array([[2, 0]])}
        >>> {name: tuple(output.shape) for name, output in model(x).items()}  # (batch, K, vocabulary), (batch, 2)
        {'mlm': (1, 2, 15), 'nsp': (1, 2)}
    """

    def __init__(self, backbone, mask_selection_length=20, nsp=True, **kwargs):
        inputs = {
            "token_ids": keras.Input((None,), dtype="int32", name="token_ids"),
            "segment_ids": keras.Input((None,), dtype="int32", name="segment_ids"),
            "padding_mask": keras.Input((None,), dtype="int32", name="padding_mask"),
            "mask_positions": keras.Input((mask_selection_length,), dtype="int32",
                                          name="mask_positions"),
        }
        encoded = backbone({k: inputs[k] for k in ENCODER_KEYS})
        mlm_head = keras_hub.layers.MaskedLMHead(
            vocabulary_size=backbone.vocabulary_size,
            token_embedding=backbone.token_embedding,  # tied output projection
            intermediate_activation="gelu",
            kernel_initializer=bert_initializer(),
            dtype=backbone.dtype_policy,
            name="mlm_head",
        )
        to_float32 = lambda name: keras.layers.Activation("linear", dtype="float32", name=name)  # noqa: E731
        outputs = {
            "mlm": to_float32("mlm")(
                mlm_head(encoded["sequence_output"], mask_positions=inputs["mask_positions"])),
        }
        if nsp:
            nsp_logits = keras.layers.Dense(2, kernel_initializer=bert_initializer(),
                                            dtype=backbone.dtype_policy, name="nsp_head")(
                encoded["pooled_output"])
            outputs["nsp"] = to_float32("nsp")(nsp_logits)
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.backbone = backbone
        self.mlm_head = mlm_head
        self.mask_selection_length = mask_selection_length
        self.nsp = nsp

    def get_config(self):
        return {
            "backbone": keras.layers.serialize(self.backbone),
            "mask_selection_length": self.mask_selection_length,
            "nsp": self.nsp,
            "name": self.name,
            "trainable": self.trainable,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.layers.deserialize(config["backbone"])
        return cls(**config)


def pretraining_compile_args(model: BertPretrainer, optimizer, jit_compile=False,
                             nsp_loss_weight=1.0) -> dict:
    """Losses and metrics for `model.compile`.

    The MLM loss is a mean over masked positions only: `mean_with_sample_weight`
    divides the weighted sum by the sum of `mask_weights`, so padded prediction
    slots neither add loss nor dilute it. Accuracies are weighted the same way.
    The training loss is `mlm + nsp_loss_weight * nsp`; the logged `mlm_loss` and
    `nsp_loss` stay unweighted.

    Example:
        >>> from kerasbert.models.encoder import build_encoder
        >>> model = BertPretrainer(build_encoder("tiny", vocabulary_size=15))
        >>> args = pretraining_compile_args(model, keras.optimizers.AdamW(1e-4), nsp_loss_weight=0.5)
        >>> args["loss_weights"], sorted(args["weighted_metrics"])
        ({'mlm': 1.0, 'nsp': 0.5}, ['mlm', 'nsp'])
        >>> model.compile(**args)
    """
    def loss():
        return keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="mean_with_sample_weight")

    losses = {"mlm": loss()}
    # With one output Keras drops the "mlm_" prefix from log names; keep it in the name.
    metrics = {"mlm": [keras.metrics.SparseCategoricalAccuracy(
        name="accuracy" if model.nsp else "mlm_accuracy")]}
    if model.nsp:
        losses["nsp"] = loss()
        metrics["nsp"] = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
    weights = {"mlm": 1.0, "nsp": nsp_loss_weight} if model.nsp else None
    return dict(optimizer=optimizer, loss=losses, loss_weights=weights, weighted_metrics=metrics,
                jit_compile=jit_compile)
