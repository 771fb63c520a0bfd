"""kerasbert's pretrainer as transformers' BertForPreTraining (kerasbert.hf.exporting.pretrainer_weights,
which bench-peers starts transformers from): the copy is checked against a NumPy forward pass
written to Hugging Face's BERT (Linear weights (out, in), tanh GELU in the encoder, the MLM
head's exact GELU and 1e-5 LayerNorm as keras-hub's)."""

import numpy as np
from scipy.special import erf

# The parameter names of transformers' BertForPreTraining with one layer (5.24.0).
HF_ONE_LAYER = {
    "bert.embeddings.word_embeddings.weight", "bert.embeddings.position_embeddings.weight",
    "bert.embeddings.token_type_embeddings.weight", "bert.embeddings.LayerNorm.weight", "bert.embeddings.LayerNorm.bias",
    *(f"bert.encoder.layer.0.{name}.{kind}" for name in (
        "attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
        "attention.output.LayerNorm", "intermediate.dense", "output.dense", "output.LayerNorm")
      for kind in ("weight", "bias")),
    "bert.pooler.dense.weight", "bert.pooler.dense.bias", "cls.predictions.bias",
    "cls.predictions.transform.dense.weight", "cls.predictions.transform.dense.bias",
    "cls.predictions.transform.LayerNorm.weight", "cls.predictions.transform.LayerNorm.bias",
    "cls.predictions.decoder.weight", "cls.predictions.decoder.bias", "cls.seq_relationship.weight",
    "cls.seq_relationship.bias",
}


def hugging_face_forward(w, token_ids, segment_ids, padding_mask, positions, num_layers, num_heads):
    """BertForPreTraining's forward pass in NumPy: MLM logits at `positions`, NSP logits."""
    def linear(x, name):
        return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]

    def norm(x, name, eps=1e-12):
        return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * w[f"{name}.weight"] \
            + w[f"{name}.bias"]

    def softmax(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    batch, length = token_ids.shape
    h = (w["bert.embeddings.word_embeddings.weight"][token_ids] + w["bert.embeddings.position_embeddings.weight"][:length]
         + w["bert.embeddings.token_type_embeddings.weight"][segment_ids])
    h = norm(h, "bert.embeddings.LayerNorm")  # (batch, seq, hidden)
    masked = (1.0 - padding_mask)[:, None, None, :] * -1e9  # (batch, 1, 1, seq)
    for i in range(num_layers):
        layer = f"bert.encoder.layer.{i}"
        q, k, v = (linear(h, f"{layer}.attention.self.{n}").reshape(batch, length, num_heads, -1).transpose(0, 2, 1, 3)
                   for n in ("query", "key", "value"))  # (batch, heads, seq, head_dim)
        attended = softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1]) + masked) @ v
        attended = attended.transpose(0, 2, 1, 3).reshape(batch, length, -1)  # (batch, seq, hidden)
        h = norm(h + linear(attended, f"{layer}.attention.output.dense"), f"{layer}.attention.output.LayerNorm")
        inner = linear(h, f"{layer}.intermediate.dense")
        inner = 0.5 * inner * (1 + np.tanh(np.sqrt(2 / np.pi) * (inner + 0.044715 * inner ** 3)))  # gelu_new
        h = norm(h + linear(inner, f"{layer}.output.dense"), f"{layer}.output.LayerNorm")
    nsp = linear(np.tanh(linear(h[:, 0], "bert.pooler.dense")), "cls.seq_relationship")
    gathered = h[np.arange(batch)[:, None], positions]  # (batch, K, hidden)
    transformed = linear(gathered, "cls.predictions.transform.dense")
    transformed = norm(0.5 * transformed * (1 + erf(transformed / np.sqrt(2))),
                       "cls.predictions.transform.LayerNorm", eps=1e-5)
    mlm = transformed @ w["cls.predictions.decoder.weight"].T + w["cls.predictions.decoder.bias"]
    return mlm, nsp


def test_pretrainer_weights_compute_what_the_pretrainer_computes():
    from kerasbert.config import ModelConfig
    from kerasbert.hf.exporting import pretrainer_weights
    from kerasbert.models.encoder import build_encoder
    from kerasbert.models.pretrainer import BertPretrainer

    model = BertPretrainer(build_encoder(ModelConfig(preset="custom", num_layers=1, hidden_dim=16, num_heads=2,
                                                     dropout=0.0), 50), mask_selection_length=3)
    for variable in model.weights:  # every weight distinct and away from its initial value
        variable.assign(np.random.default_rng(len(variable.path)).normal(0, 0.3, variable.shape))
    weights = pretrainer_weights(model)
    assert set(weights) == HF_ONE_LAYER
    rng = np.random.default_rng(0)
    x = {"token_ids": rng.integers(5, 50, (2, 7)).astype("int32"),
         "segment_ids": np.array([[0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0, 0]], "int32"),
         "padding_mask": np.array([[1] * 7, [1, 1, 1, 1, 1, 0, 0]], "int32"),
         "mask_positions": np.array([[1, 4, 6], [2, 3, 0]], "int32")}
    expected = model(x)
    mlm, nsp = hugging_face_forward(weights, x["token_ids"], x["segment_ids"], x["padding_mask"],
                                    x["mask_positions"], num_layers=1, num_heads=2)
    np.testing.assert_allclose(mlm, expected["mlm"].numpy(), atol=2e-4)
    np.testing.assert_allclose(nsp, expected["nsp"].numpy(), atol=2e-4)
