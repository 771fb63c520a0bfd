"""kerasbert: pretrain a BERT (masked-LM + next-sentence prediction), fine-tune one encoder
on several tasks at once, and export it as a SavedModel for TensorFlow Serving.

The names below are the public API; everything else is internal. They load on first
use, so `import kerasbert` is instant and TensorFlow starts only when a name needs it,
without its C++ start-up lines (KERASBERT_VERBOSE=1 shows them; `kerasbert.quiet`).

Example (pretraining in your own fit script; here a 15-token vocabulary, a tiny corpus and 2 steps):
    >>> import keras, kerasbert
    >>> tokenizer = kerasbert.make_tokenizer(vocab_file)  # or load_tokenizer(minilm_checkpoint())
    >>> encoder = kerasbert.build_encoder("tiny", vocabulary_size=tokenizer.vocabulary_size())
    >>> model = kerasbert.BertPretrainer(encoder, mask_selection_length=4)
    >>> model.compile(**kerasbert.pretraining_compile_args(model, kerasbert.FusedAdamW(1e-4)))
    >>> data = kerasbert.text_pretraining_dataset([corpus_file], tokenizer, sequence_length=32, batch_size=8,
    ...                                           data=kerasbert.PretrainDataConfig(mask_selection_length=4))
    >>> history = model.fit(data, steps_per_epoch=2, verbose=0)
    >>> sorted(history.history)
    ['loss', 'mlm_accuracy', 'mlm_loss', 'nsp_accuracy', 'nsp_loss']
"""

from __future__ import annotations

import importlib

# Public name -> the module that defines it.
_MODULES = {
    # Configs: plain frozen dataclasses, loaded from JSON, overridden with "section.key=value".
    "ModelConfig": "kerasbert.config",
    "PretrainDataConfig": "kerasbert.config",
    "TrainConfig": "kerasbert.config",
    "PretrainConfig": "kerasbert.config",
    "FinetuneDataConfig": "kerasbert.config",
    "HeadsConfig": "kerasbert.config",
    "ScheduleConfig": "kerasbert.config",
    "FinetuneConfig": "kerasbert.config",
    "load_config": "kerasbert.config",
    # Expected failures (bad config, bad data, no readable backup, non-finite values): one base.
    "KerasbertError": "kerasbert.errors",
    "ConfigError": "kerasbert.errors",
    "DataError": "kerasbert.errors",  # a data file missing or unreadable, naming file and line
    "save_config": "kerasbert.config",
    # Encoders and tokenizers (keras-hub's BertBackbone and BertTokenizer).
    "build_encoder": "kerasbert.models.encoder",
    "load_encoder": "kerasbert.models.encoder",
    "minilm_checkpoint": "kerasbert.models.encoder",
    "load_tokenizer": "kerasbert.tokenization",
    "make_tokenizer": "kerasbert.tokenization",
    "train_vocabulary": "kerasbert.tokenization",
    # Pretraining.
    "BertPretrainer": "kerasbert.models.pretrainer",
    "pretraining_compile_args": "kerasbert.models.pretrainer",
    "text_pretraining_dataset": "kerasbert.pretraining.inputs",
    "run_pretraining": "kerasbert.pretraining.run",
    "FusedAdamW": "kerasbert.training.optim",
    # Multitask fine-tuning: the declared tasks, their model, data and scores.
    "Task": "kerasbert.tasks",
    "TaggingSettings": "kerasbert.families.tagging",  # a tags task's settings (Task.settings)
    "SpanSettings": "kerasbert.families.span_qa",  # a span task's
    "get_task": "kerasbert.tasks",
    "task_names": "kerasbert.tasks",
    "MultitaskBert": "kerasbert.finetuning.model",
    "TaskPreprocessor": "kerasbert.finetuning.data",
    "read_training_file": "kerasbert.data.task_files",  # a task's classes (or score range) from its file
    "load_examples": "kerasbert.data.task_files",
    "task_dataset": "kerasbert.finetuning.data",
    "interleave_tasks": "kerasbert.finetuning.data",
    "load_finetuned": "kerasbert.finetuning.load",
    "TextPredictor": "kerasbert.finetuning.text_predictor",  # a fine-tuned model on raw strings
    "score_file": "kerasbert.finetuning.evaluation",
    "run_finetuning": "kerasbert.finetuning.run",
    # Export for TensorFlow Serving, and tf.distribute strategies by name.
    "export_model": "kerasbert.export",
    "export_saved_model": "kerasbert.export",
    "make_strategy": "kerasbert.training.strategy",
    # transformers BERT checkpoints in (as runs) and out (a folder per task).
    "load_transformers": "kerasbert.hf.importing",
    "import_transformers": "kerasbert.hf.importing",
    "export_transformers": "kerasbert.hf.exporting",
    # TensorFlow's oneDNN CPU kernels on every x86 CPU (call before TensorFlow is imported).
    "prefer_onednn": "kerasbert.cpu_kernels",
}

__all__ = list(_MODULES)
# Modules that need no TensorFlow; the others load it first, quietly (with oneDNN's kernels).
_WITHOUT_TENSORFLOW = {"kerasbert.config", "kerasbert.tasks", "kerasbert.cpu_kernels", "kerasbert.errors",
                       "kerasbert.data.task_files"}


def __getattr__(name: str):
    if name not in _MODULES:
        raise AttributeError(f"module 'kerasbert' has no attribute {name!r}")
    if _MODULES[name] not in _WITHOUT_TENSORFLOW:
        from kerasbert.cpu_kernels import prefer_onednn

        prefer_onednn()
    value = getattr(importlib.import_module(_MODULES[name]), name)
    globals()[name] = value  # the next lookup is an ordinary attribute
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
