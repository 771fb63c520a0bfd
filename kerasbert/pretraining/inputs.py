"""From text and a config to pretraining batches: documents -> token ids -> NSP pairs ->
packed, masked `tf.data` batches. The pretraining run and users' own fit scripts build
their data here.

Example:
    >>> from kerasbert.models.encoder import minilm_checkpoint
    >>> tokenizer = tokenization.load_tokenizer(minilm_checkpoint())
    >>> data = text_pretraining_dataset([corpus_file], tokenizer, sequence_length=64, batch_size=8)
    >>> x, y, sample_weight = next(iter(data))
    >>> sorted(x), sorted(y)
    (['mask_positions', 'padding_mask', 'segment_ids', 'token_ids'], ['mlm', 'nsp'])
    >>> x["token_ids"].shape, x["mask_positions"].shape  # (batch, sequence), (batch, data.mask_selection_length)
    (TensorShape([8, 64]), TensorShape([8, 20]))
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from kerasbert import tokenization
from kerasbert.config import ModelConfig, PretrainConfig, PretrainDataConfig, TrainConfig
from kerasbert.data.corpus import default_data_dir, load_corpora, load_labelled_corpora
from kerasbert.errors import DataError
from kerasbert.packing import make_packer
from kerasbert.pretraining.dataset import examples_dataset, heldout_dataset, pretraining_dataset
from kerasbert.pretraining.masking import Masker
from kerasbert.pretraining.pairs import build_pairs


def tokenize_documents(tokenizer, documents):
    flat = tokenization.tokenize_sentences(tokenizer, [s for doc in documents for s in doc])
    it = iter(flat)
    return [[next(it) for _ in doc] for doc in documents]


def make_masker(config: PretrainConfig, tokenizer, seed=None,
                selection_rate: float | None = None) -> Masker:
    """The configured masker; `selection_rate` overrides `data.mask_selection_rate`."""
    ids = tokenization.special_token_ids(tokenizer)
    data = config.data
    return Masker(
        vocabulary_size=tokenizer.vocabulary_size(), mask_token_id=ids["mask"],
        unselectable_token_ids=[ids["pad"], ids["cls"], ids["sep"]], strategy=data.masking,
        mask_selection_rate=selection_rate or data.mask_selection_rate,
        mask_selection_length=data.mask_selection_length,
        mask_token_rate=data.mask_token_rate, random_token_rate=data.random_token_rate,
        continuation=tokenization.continuation_table(tokenizer) if data.masking != "token" else None,
        span_geometric_p=data.span_geometric_p, span_max_length=data.span_max_length, seed=seed)


def training_pairs(config: PretrainConfig, tokenized_documents, sources) -> list[dict]:
    """The training examples `config` builds from tokenized documents (seeded by `train.seed`)."""
    data = config.data
    return build_pairs(tokenized_documents, config.model.max_sequence_length,
                       np.random.default_rng(config.train.seed), nsp=data.nsp,
                       short_seq_prob=data.short_seq_prob, dupe_factor=data.dupe_factor,
                       sources=sources)


def heldout_pairs(config: PretrainConfig, tokenizer, data_dir: str) -> list[dict]:
    """The held-out examples every run of `config` scores: pairs from `data.heldout_source`
    (seeded by `train.seed + 1`), the first `data.heldout_examples` of them."""
    documents = load_corpora([config.data.heldout_source], data_dir)
    pairs = build_pairs(tokenize_documents(tokenizer, documents), config.model.max_sequence_length,
                        np.random.default_rng(config.train.seed + 1), nsp=config.data.nsp)
    return pairs[: config.data.heldout_examples]


def check_enough_examples(examples: list, batch_size: int, what: str, setting: str = "train.batch_size") -> None:
    """Raises unless `examples` fill one batch; `setting` names the batch size for the user."""
    if len(examples) < batch_size:
        raise DataError(f"{what}: {len(examples)} examples, fewer than one batch "
                        f"({setting}={batch_size}). Use more text or a smaller batch.")


def training_batches(config: PretrainConfig, tokenizer, examples: tf.data.Dataset,
                     skip_batches: int = 0) -> tf.data.Dataset:
    """Shuffled, repeated, packed batches of `examples`, masked afresh each time they are drawn."""
    ids = tokenization.special_token_ids(tokenizer)
    return pretraining_dataset(
        examples, make_packer(config.model.max_sequence_length, ids), make_masker(config, tokenizer),
        config.train.batch_size, ids["pad"], seed=config.train.seed,
        shuffle_buffer=config.train.shuffle_buffer, skip_batches=skip_batches, nsp=config.data.nsp)


def heldout_batches(config: PretrainConfig, tokenizer, pairs: list[dict]) -> tf.data.Dataset:
    """One pass over `pairs`, masked once at `data.heldout_mask_selection_rate`: the same
    masks in every run with the same seed."""
    ids = tokenization.special_token_ids(tokenizer)
    masker = make_masker(config, tokenizer, seed=config.train.seed,
                         selection_rate=config.data.heldout_mask_selection_rate)
    return heldout_dataset(examples_dataset(pairs), make_packer(config.model.max_sequence_length, ids),
                           masker, config.train.batch_size, ids["pad"], nsp=config.data.nsp)


def text_pretraining_dataset(text_files: list[str], tokenizer, *, sequence_length: int = 128,
                             batch_size: int = 32, data: PretrainDataConfig = PretrainDataConfig(),
                             seed: int = 1234, heldout: bool = False,
                             data_dir: str | None = None) -> tf.data.Dataset:
    """MLM + NSP batches for `model.fit` from plain text files (documents separated by blank
    lines; shared corpus names such as `wikitext` work too, read from `data_dir`).

    Batches are Keras' `(x, y, sample_weight)` for a `BertPretrainer` with
    `mask_selection_length=data.mask_selection_length`. Training data repeats without
    end (give `fit` its `steps_per_epoch`) and is masked afresh at every draw;
    `heldout=True` gives one pass masked once, for `validation_data` or `evaluate`.
    `data` sets the masking and NSP options (`kerasbert.PretrainDataConfig`).

    Example:
        >>> data = text_pretraining_dataset([corpus_file], tokenizer, sequence_length=32, batch_size=8,
        ...                                 data=PretrainDataConfig(mask_selection_length=6, nsp=False))
        >>> x, y, sample_weight = next(iter(data))
        >>> sorted(y), x["mask_positions"].shape  # for a BertPretrainer(..., mask_selection_length=6, nsp=False)
        (['mlm'], TensorShape([8, 6]))
    """
    config = PretrainConfig(model=dataclasses.replace(ModelConfig(), max_sequence_length=sequence_length),
                            data=data, train=TrainConfig(batch_size=batch_size, seed=seed))
    documents, sources = load_labelled_corpora(list(text_files), data_dir or default_data_dir())
    pairs = training_pairs(config, tokenize_documents(tokenizer, documents), sources)
    check_enough_examples(pairs, batch_size, str(list(text_files)), setting="batch_size")
    if heldout:
        return heldout_batches(config, tokenizer, pairs)
    return training_batches(config, tokenizer, examples_dataset(pairs))
