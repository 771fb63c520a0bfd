"""An embedding task as a sentence-transformers model folder: the files beside transformers'
BertModel ones (config.json, model.safetensors, vocab.txt, tokenizer files: kerasbert/hf/exporting.py)
that make `SentenceTransformer(folder)` compute the task's signature: the encoder, mean pooling
over the real tokens, L2 normalisation. The layout is all-MiniLM-L6-v2's own.

Example:
    >>> files = sentence_transformers_files(hidden=384, max_seq_length=128)
    >>> sorted(files), files["1_Pooling/config.json"]["pooling_mode_mean_tokens"]
    (['1_Pooling/config.json', '2_Normalize/config.json', 'config_sentence_transformers.json', 'modules.json', 'sentence_bert_config.json'], True)
"""

from __future__ import annotations

MODULES = (("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize"))


def sentence_transformers_files(hidden: int, max_seq_length: int) -> dict[str, dict | list]:
    """{path in the folder: JSON content}. max_seq_length is the run's packed length, where the
    task's signature cuts a text too (with [CLS] and [SEP])."""
    return {
        "modules.json": [{"idx": index, "name": str(index), "path": path, "type": f"sentence_transformers.models.{kind}"}
                         for index, (path, kind) in enumerate(MODULES)],
        "sentence_bert_config.json": {"max_seq_length": max_seq_length, "do_lower_case": False},
        "1_Pooling/config.json": {"word_embedding_dimension": hidden, "pooling_mode_cls_token": False,
                                  "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
                                  "pooling_mode_mean_sqrt_len_tokens": False},
        "2_Normalize/config.json": {},
        "config_sentence_transformers.json": {"similarity_fn_name": "cosine"},
    }
