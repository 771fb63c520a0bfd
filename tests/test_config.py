"""Config loading, overrides and validation."""

import dataclasses
import json

import pytest

from kerasbert.config import (ConfigError, FinetuneConfig, PretrainConfig, from_dict, load_config, save_config,
                              to_dict)


def test_preset_fills_sizes_and_overrides_apply(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"model": {"preset": "mini"}, "train": {"total_steps": 100,
                                                                        "steps_per_block": 50},
                                "data": {"sources": ["sst"]}}))
    config = load_config(PretrainConfig, str(path), ["train.learning_rate=3e-4", "data.nsp=false",
                                                     "data.sources=wikitext,imdb"])
    assert (config.model.num_layers, config.model.hidden_dim, config.model.num_heads) == (4, 256, 4)
    assert config.model.intermediate_dim == 1024
    assert config.train.learning_rate == 3e-4 and config.data.nsp is False
    assert config.data.sources == ("wikitext", "imdb")


def test_saved_config_loads_back_equal(tmp_path):
    config = load_config(PretrainConfig, None, ["model.preset=small"])
    save_config(config, str(tmp_path / "config.json"))
    assert load_config(PretrainConfig, str(tmp_path / "config.json")) == config


@pytest.mark.parametrize("override, message", [
    ("train.lr=1", "Unknown config key 'train.lr'"),
    ("trian.total_steps=1", r"Unknown config section 'trian' .* Sections: \['data', 'model', 'train'\]"),
    ("model.preset=huge", "model.preset must be one of"),
    ("data.masking=random", "data.masking must be"),
    ("train.total_steps=110", "multiple of train.steps_per_block"),
    ("model.num_heads=3", "multiple of model.num_heads"),
    ("model.position_init=rotary", "model.position_init must be"),
    ("train.batch_size=abc", "Bad value"),
    ("train.ema_momentum=1", "train.ema_momentum must be in"),
    ("train.head_warmup_steps=-1", "train.head_warmup_steps must be >= 0"),
])
def test_bad_values_name_the_field(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(PretrainConfig, None, [override])


def test_a_section_given_in_part_keeps_its_parents_defaults_for_the_rest(tmp_path):
    finetune = FinetuneConfig().train  # fine-tuning's own: 5e-5 over 600 steps, not TrainConfig()'s
    overridden = load_config(FinetuneConfig, None, ["train.batch_size=8"]).train
    assert overridden.batch_size == 8
    assert (overridden.learning_rate, overridden.total_steps, overridden.steps_per_block) == (
        finetune.learning_rate, finetune.total_steps, finetune.steps_per_block) == (5e-5, 600, 100)
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"train": {"seed": 7}}))
    assert load_config(FinetuneConfig, str(path)).train == dataclasses.replace(finetune, seed=7)


def test_bad_json_names_file_and_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{\n  "model": {,}\n}')
    with pytest.raises(ConfigError, match=r"bad.json:2: invalid JSON"):
        load_config(PretrainConfig, str(path))


def test_similarity_head_can_take_its_own_encoder(tmp_path):
    config = load_config(FinetuneConfig, None, ["tasks=sst,para,sts", "tasks.sts.encoder=bi", "tasks.sts.loss=cosine"])
    encoders = {name: config.heads.encoder_of(task) for name, task in config.tasks.items()}
    assert encoders == {"sst": "", "para": "cross", "sts": "bi"}
    heads = load_config(FinetuneConfig, None, ["heads.pair_encoder=bi"]).heads
    assert [heads.encoder_of(config.tasks[name]) for name in ("para", "sts")] == ["bi", "bi"]
    with pytest.raises(ConfigError, match=r"^task 'sts': loss=cosine needs a bi-encoder similarity head"):
        load_config(FinetuneConfig, None, ["heads.pair_encoder=bi", "tasks.sts.encoder=cross", "tasks.sts.loss=cosine"])
    with pytest.raises(ConfigError, match=r"^task 'sts': encoder must be cross, bi or empty"):
        load_config(FinetuneConfig, None, ["tasks.sts.encoder=both"])
    with pytest.raises(ConfigError, match=r"^task 'sst': mnrl_weight is a pair_binary task's"):
        load_config(FinetuneConfig, None, ["tasks.sst.mnrl_weight=0.5"])
    # The heads section's sentence settings until issue 86: a config file keeps them, --set names the new key.
    (tmp_path / "old.json").write_text(json.dumps({"heads": {"pair_encoder": "bi", "sts_encoder": "bi",
                                                             "sts_loss": "cosine", "para_mnrl_weight": 0.5}}))
    old = load_config(FinetuneConfig, str(tmp_path / "old.json"))
    assert (old.tasks["sts"].settings.loss, old.tasks["para"].settings.mnrl_weight) == ("cosine", 0.5)
    assert old.tasks["sst"] == config.tasks["sst"] and "sts_encoder" not in to_dict(old)["heads"]
    with pytest.raises(ConfigError, match=r"^--set 'heads.sts_encoder=bi': heads.sts_encoder is a task's setting "
                                          r"since issue 86: --set tasks.TASK.encoder="):
        load_config(FinetuneConfig, None, ["heads.sts_encoder=bi"])


def test_weight_average_is_refused_with_updates_rescaled_after_the_optimizer():
    assert load_config(FinetuneConfig, None, ["train.ema_momentum=0.99"]).train.ema_momentum == 0.99
    with pytest.raises(ConfigError, match="ema_momentum cannot be combined with schedule.layerwise_lr_decay"):
        load_config(FinetuneConfig, None, ["train.ema_momentum=0.99", "schedule.layerwise_lr_decay=0.9"])
    with pytest.raises(ConfigError, match="ema_momentum cannot be combined with schedule.hold_idle_heads"):
        load_config(FinetuneConfig, None, ["train.ema_momentum=0.99", "schedule.hold_idle_heads=true"])


def test_task_shares_are_taken_only_with_shares_sampling():
    config = load_config(FinetuneConfig, None, ["schedule.sampling=shares", "schedule.shares.para=0",
                                                "schedule.shares.sts=0"])
    assert config.schedule.shares == {"sst": 1.0, "para": 0.0, "sts": 0.0}  # the run's tasks
    assert config.trained_tasks == ("sst",)
    with pytest.raises(ConfigError, match="schedule.shares needs schedule.sampling=shares"):
        load_config(FinetuneConfig, None, ["schedule.shares.sst=2"])
    with pytest.raises(ConfigError, match="must have a positive sum"):
        load_config(FinetuneConfig, None, ["schedule.sampling=shares", "schedule.shares.sst=0",
                                           "schedule.shares.para=0", "schedule.shares.sts=0"])


def test_tasks_are_named_once_and_checked():
    config = load_config(FinetuneConfig, None, ["tasks=cfimdb,sst", "data.train_files.cfimdb=/my/reviews.tsv",
                                                "schedule.loss_weights.cfimdb=2"])
    assert tuple(config.tasks) == ("cfimdb", "sst")  # as given: the first is the export's serving_default
    assert config.tasks["cfimdb"].train_file == "/my/reviews.tsv"
    assert config.tasks["cfimdb"].dev_file == "cs224n/cfimdb-dev.tsv"  # the declared default
    assert config.schedule.loss_weights == {"cfimdb": 2, "sst": 1.0}
    with pytest.raises(ConfigError, match=r"Unknown task 'imdb': declare it .* or name one of the shipped tasks "
                                          r"\('sst', 'para', 'sts', 'cfimdb', 'sst2', 'ner', 'squad'\)"):
        load_config(FinetuneConfig, None, ["tasks=sst,imdb"])
    with pytest.raises(ConfigError, match=r"data.dev_files names task\(s\) \['imdb'\] the run does not declare"):
        from_dict(FinetuneConfig, {"data": {"dev_files": {"imdb": "x.tsv"}}})


def test_config_files_from_before_the_task_declarations_still_load(tmp_path):
    """Run folders and configs written with the per-task keys (`sst_dev`, `sts_weight`)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"data": {"sst_dev": "my-sst-dev.tsv", "max_sequence_length": 64},
                                "schedule": {"sampling": "shares", "sts_share": 0, "sts_weight": 10.0}}))
    config = load_config(FinetuneConfig, str(path))
    assert config.tasks["sst"].dev_file == "my-sst-dev.tsv" and config.data.max_sequence_length == 64
    assert config.schedule.shares["sts"] == 0 and config.schedule.loss_weights["sts"] == 10.0
    assert config.trained_tasks == ("sst", "para")


def test_finetuning_refuses_mixed_precision_rather_than_ignore_it():
    with pytest.raises(ConfigError, match="train.mixed_precision is for pretraining"):
        load_config(FinetuneConfig, None, ["train.mixed_precision=true"])


def test_a_run_leaves_the_global_dtype_policy_as_it_found_it():
    import keras

    from kerasbert.training.precision import mixed_precision

    with mixed_precision(True):
        assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
    assert keras.mixed_precision.global_policy().name == "float32"
