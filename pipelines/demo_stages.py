"""The stages of `python -m pipelines.demo`, run in order, timed, and written up.

Each stage prints a header with the elapsed time and leaves its artefacts under the
output folder; the last one writes `report.md` linking the plots and the metrics.

Example (`Demo(parse_args([...])).run()` runs all 7 stages, minutes; here the config check, and stage 1
on a tiny corpus of its own):
    >>> from pipelines.demo import parse_args
    >>> demo = Demo(parse_args(["--data_dir", data_dir, "--output_dir", f"{tmp_path}/demo",
    ...                         "--set", f"pretrain.data.sources={corpus_file}", "--set", "pretrain.data.vocab_size=30"]))
    >>> demo.check_configs()  # every stage's config, before stage 1: a bad --set fails at once
    >>> os.makedirs(demo.output_dir)
    >>> demo.vocabulary()
       WordPiece on 60 sentences of ...corpus.txt
       30 tokens -> .../demo/vocab.txt
    >>> demo.pretrain_config.data.vocab_file == demo.path("vocab.txt")  # what stage 2 pretrains with
    True
"""

from __future__ import annotations

import datetime
import json
import os
import time

import numpy as np

from kerasbert.config import FinetuneConfig, PretrainConfig, load_config
from kerasbert.finetuning.evaluation import REFERENCE_STUDY, overall_score
from kerasbert.finetuning.report import class_table

SENTENCES = ["A gripping, funny and deeply moving film.", "The plot is thin and the acting is even worse.",
             "An ordinary thriller with one or two good scenes."]
PAIRS = [("How can I learn Python quickly?", "What is the fastest way to learn Python?"),
         ("How can I learn Python quickly?", "What is the capital of Australia?"),
         ("A man is playing a guitar on stage.", "A musician performs with his guitar."),
         ("A woman is slicing an onion.", "A dog runs across the beach.")]
DEV_METRICS = [("SST-5", "accuracy", "sst_accuracy"), ("Quora", "accuracy", "para_accuracy"),
               ("STS-B", "Pearson", "sts_pearson")]


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{seconds % 60:04.1f}s"


def _stage_overrides(overrides: list[str], stage: str) -> list[str]:
    return [o[len(stage) + 1:] for o in overrides if o.startswith(stage + ".")]


class Demo:
    """Runs vocabulary -> pretrain -> fine-tune -> evaluate -> export -> serve -> report."""

    def __init__(self, args):
        self.args = args
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.output_dir = os.path.abspath(args.output_dir or os.path.join("runs", f"demo-{stamp}"))
        self.timings: list[tuple[str, float]] = []
        self.results: dict = {}
        self.started = time.perf_counter()

    def path(self, *parts: str) -> str:
        return os.path.join(self.output_dir, *parts)

    def run(self) -> dict:
        from serving.process import stop_on_sigterm

        stop_on_sigterm()  # a SIGTERM unwinds like Ctrl-C, so the server is stopped
        self.check_configs()
        os.makedirs(self.output_dir, exist_ok=True)
        stages = [("vocabulary", self.vocabulary), ("pretrain", self.pretrain), ("fine-tune", self.finetune),
                  ("evaluate", self.evaluate), ("export", self.export), ("serve", self.serve),
                  ("report", self.report)]
        for number, (title, stage) in enumerate(stages, start=1):
            print(f"\n== [{number}/{len(stages)}] {title} (elapsed {_minutes(time.perf_counter() - self.started)})",
                  flush=True)
            began = time.perf_counter()
            stage()
            self.timings.append((title, time.perf_counter() - began))
            print(f"   {title} done in {_minutes(self.timings[-1][1])}", flush=True)
        print(self.summary(), flush=True)
        return self.results

    def check_configs(self) -> None:
        """Loads and checks every stage's config, overrides applied, before stage 1 runs: a bad
        `--set` is refused at once, not after the stages before it have worked for minutes."""
        load_config(PretrainConfig, self.args.pretrain_config, _stage_overrides(self.args.overrides, "pretrain"))
        self.finetune_config = load_config(FinetuneConfig, self.args.finetune_config,
                                           _stage_overrides(self.args.overrides, "finetune"))

    # --- Stages -----------------------------------------------------------------------

    def vocabulary(self) -> None:
        from kerasbert.data.corpus import load_corpora
        from kerasbert.tokenization import train_vocabulary

        overrides = _stage_overrides(self.args.overrides, "pretrain")
        config = load_config(PretrainConfig, self.args.pretrain_config, overrides)
        documents = load_corpora(config.data.sources, self.args.data_dir)  # also checks the data is there
        sentences = [s for document in documents for s in document]
        vocab_path = self.path("vocab.txt")
        if os.path.isfile(vocab_path) and not self.args.overwrite:
            print(f"   {vocab_path} is there from before: kept (--overwrite trains it again)")
        else:
            print(f"   WordPiece on {len(sentences)} sentences of {', '.join(config.data.sources)}", flush=True)
            vocabulary = train_vocabulary(sentences, config.data.vocab_size, vocab_path)
            print(f"   {len(vocabulary)} tokens -> {vocab_path}")
        self.pretrain_config = load_config(PretrainConfig, self.args.pretrain_config,
                                           overrides + [f"data.vocab_file={vocab_path}"])

    def pretrain(self) -> None:
        from kerasbert.pretraining.run import run_pretraining

        self.results["pretrain"] = run_pretraining(self.pretrain_config, self.args.data_dir, self.path("pretrain"),
                                                   overwrite=self.args.overwrite)

    def finetune(self) -> None:
        from kerasbert.finetuning.run import run_finetuning

        init = self.args.init_checkpoint
        if init == "minilm":
            from kerasbert.models.encoder import minilm_checkpoint
            init = minilm_checkpoint()
        elif init == "pretrained":
            init = self.path("pretrain")
        self.init_checkpoint = init
        self.results["finetune"] = run_finetuning(self.finetune_config, self.args.data_dir, self.path("finetune"), init,
                                                  overwrite=self.args.overwrite)

    def evaluate(self) -> None:
        from kerasbert.finetuning.data import resolve_path
        from kerasbert.finetuning.evaluation import score_file
        from kerasbert.finetuning.load import load_finetuned

        config, self.model, self.preprocessor = load_finetuned(self.path("finetune"))
        metrics = {}
        for task in config.tasks:
            path = resolve_path(self.args.data_dir, config.tasks[task].dev_file)
            metrics.update(score_file(self.model, self.preprocessor, task, path, self.args.eval_examples))
            metrics[f"{task}_dev_file"] = path
        metrics["overall"] = overall_score(metrics, [self.model.task_specs[task] for task in config.tasks])
        metrics["examples_per_task"] = self.args.eval_examples or "all"
        with open(self.path("dev_metrics.json"), "w") as f:
            json.dump(metrics, f, indent=2)
        self.results["dev"] = metrics
        print("   " + "  ".join(f"{name} {kind} {metrics[key]:.3f}" for name, kind, key in DEV_METRICS)
              + f"  overall {metrics['overall']:.3f}")

    def export(self) -> None:
        from kerasbert.export import export_saved_model

        previous = self._previous_export()
        if previous and not self.args.overwrite:
            self.export_path = previous
            print(f"   {previous} holds this fine-tuned model from before: kept (--overwrite exports it again)")
        else:
            self.export_path = export_saved_model(self.path("finetune"), self.args.export_base)
            print(f"   SavedModel -> {self.export_path}")
        self.version = int(os.path.basename(self.export_path))
        self.results["export_path"] = self.export_path

    def _previous_export(self) -> str | None:
        """The version a finished demo in this folder exported from the same fine-tuning run,
        if it is still there."""
        try:
            with open(self.path("results.json")) as f:
                path = json.load(f).get("export_path")
        except (OSError, ValueError):
            return None
        finetuned = os.path.getmtime(self.path("finetune", "metrics.json"))
        if path and os.path.isfile(os.path.join(path, "saved_model.pb")) and os.path.getmtime(path) >= finetuned:
            return path
        return None

    def serve(self) -> None:
        from serving.client import ServingClient
        from serving.process import LocalServer

        with LocalServer("kerasbert", self.args.export_base, log_path=self.path("server.log")) as server:
            print(f"   python -m serving on 127.0.0.1 (REST :{server.rest_port}, gRPC :{server.grpc_port}); "
                  f"log {self.path('server.log')}", flush=True)
            server.wait_for_version(self.version)
            client = ServingClient("kerasbert", rest_port=server.rest_port, version=self.version, timeout=60)
            a, b = [p[0] for p in PAIRS], [p[1] for p in PAIRS]
            answers = {"sentiment": client.predict("sentiment", {"text": SENTENCES}),
                       "paraphrase": client.predict("paraphrase", {"text_a": a, "text_b": b}),
                       "similarity": client.predict("similarity", {"text_a": a, "text_b": b})}
            print(f"   queried {server.url(f'/versions/{self.version}')}:predict; stopping the server")
        answers["max_difference_from_keras"] = self._difference_from_keras(answers)
        if answers["max_difference_from_keras"] > 1e-4:
            raise RuntimeError(f"the served answers differ from the fine-tuned Keras model's by "
                               f"{answers['max_difference_from_keras']:.2g}")
        self.results["rest"] = answers

    def _difference_from_keras(self, answers: dict) -> float:
        """Largest gap between the REST answers and the in-process Keras model on the same text."""
        import tensorflow as tf

        pre, model = self.preprocessor, self.model
        text, a, b = tf.constant(SENTENCES), tf.constant([p[0] for p in PAIRS]), tf.constant([p[1] for p in PAIRS])
        expected = {
            ("sentiment", "probabilities"): model.task_prediction("sst", pre("sst", text, text)),
            ("paraphrase", "probability"): model.task_prediction("para", pre("para", a, b)),
            ("similarity", "score"): model.task_prediction("sts", pre("sts", a, b)),
        }
        return max(float(np.max(np.abs(np.array(answers[signature][key]) - value.numpy())))
                   for (signature, key), value in expected.items())

    def report(self) -> None:
        with open(self.path("report.md"), "w") as f:
            f.write(self.markdown())
        with open(self.path("results.json"), "w") as f:
            json.dump({"timings": dict(self.timings), **self.results}, f, indent=2, default=str)
        print(f"   {self.path('report.md')}")

    # --- What the user reads ------------------------------------------------------------

    def dev_table(self) -> list[str]:
        dev = self.results["dev"]
        names = list(REFERENCE_STUDY)
        lines = [f"| task | metric | this run | reference: {names[0]} | reference: {names[1]} |",
                 "|---|---|---:|---:|---:|"]
        for name, kind, key in DEV_METRICS:
            lines.append(f"| {name} | {kind} | {dev[key]:.3f} | {REFERENCE_STUDY[names[0]][key]:.3f} | "
                         f"{REFERENCE_STUDY[names[1]][key]:.3f} |")
        beats = all(dev[key] > REFERENCE_STUDY[names[0]][key] for _, _, key in DEV_METRICS)
        lines += ["", f"Overall {dev['overall']:.3f}. Beats the reference study's {names[0]} on all three "
                      f"tasks: **{'yes' if beats else 'no'}**."]
        return lines

    def answer_tables(self) -> list[str]:
        rest = self.results["rest"]
        sentiment, paraphrase, similarity = rest["sentiment"], rest["paraphrase"], rest["similarity"]
        lines = ["| sentence | sentiment | probability |", "|---|---|---:|"]
        names = sentiment.get("class_name") or sentiment["label"]  # exports before class_name: the ids
        for text, label, name, probabilities in zip(SENTENCES, sentiment["label"], names, sentiment["probabilities"]):
            lines.append(f"| {text} | {label} ({name}) | {probabilities[label]:.3f} |")
        lines += ["", "| sentence a | sentence b | paraphrase p | similarity (0-5) |", "|---|---|---:|---:|"]
        for (a, b), p, score in zip(PAIRS, paraphrase["probability"], similarity["score"]):
            lines.append(f"| {a} | {b} | {p:.3f} | {score:.2f} |")
        lines += ["", f"Largest difference from the fine-tuned Keras model on the same text: "
                      f"{rest['max_difference_from_keras']:.1e}."]
        return lines

    def markdown(self) -> str:
        pretrain, finetune = self.results["pretrain"], self.results["finetune"]
        total = sum(seconds for _, seconds in self.timings)
        lines = [f"# kerasbert demo: {os.path.basename(self.output_dir)}", "",
                 f"Whole path in {_minutes(total)} (before this report). Data: `{self.args.data_dir}`.", "",
                 "| stage | time |", "|---|---:|"]
        lines += [f"| {title} | {_minutes(seconds)} |" for title, seconds in self.timings]
        lines += ["", "## Pretraining (tiny BERT, masked LM + next sentence)", "",
                  f"{pretrain['train_steps']} steps; on held-out WikiText-2 test documents: MLM accuracy "
                  f"{pretrain['mlm_accuracy']:.3f}, NSP accuracy {pretrain['nsp_accuracy']:.3f} "
                  f"(MLM loss {pretrain['mlm_loss']:.2f}, NSP loss {pretrain['nsp_loss']:.3f}). "
                  f"Metrics: [pretrain/metrics.json](pretrain/metrics.json).", "",
                  "![pretraining curves](pretrain/curves.png)", "",
                  "## Multitask fine-tuning", "",
                  f"From `{self.init_checkpoint}`, {finetune['train_steps']} steps, "
                  f"{finetune['pair_encoder']}-encoder paraphrase head, "
                  f"{finetune['sts_encoder']}-encoder similarity head. The weights of step "
                  f"{finetune.get('best_step', finetune['train_steps'])} are kept: the best dev score on "
                  f"the examples that choose the block ({self._selection_sizes(finetune)}).", "",
                  "![fine-tuning curves](finetune/curves.png)", "",
                  "![SST-5 confusion matrix on the selection examples](finetune/sst_confusion.png)", "",
                  *(["SST-5 per class, on the examples that chose the block:", "",
                     *class_table(finetune["per_class"]["sst"]), ""] if "sst" in finetune.get("per_class", {}) else []),
                  f"## Dev sets ({self.results['dev']['examples_per_task']} examples per task)", ""]
        lines += self.dev_table()
        lines += ["", f"## Served answers (REST, `python -m serving`, version {self.version})", ""]
        lines += self.answer_tables()
        lines += ["", "## Artefacts", "",
                  "- `vocab.txt`: the WordPiece vocabulary of stage 1",
                  "- `pretrain/`: config, checkpoints, TensorBoard logs, encoder preset, metrics, curves",
                  "- `finetune/`: config, model.keras, encoder preset, dev predictions, curves, confusion matrix",
                  "- `dev_metrics.json`, `results.json`, `server.log`",
                  f"- SavedModel: `{self.export_path}`", ""]
        return "\n".join(lines)

    @staticmethod
    def _selection_sizes(finetune: dict) -> str:
        sizes = finetune.get("dev_examples", {})
        return ", ".join(f"{task} {count}" for task, count in sizes.items()) or "see finetune/config.json"

    def summary(self) -> str:
        lines = ["", "== kerasbert demo: summary", ""] + self.dev_table() + [""] + self.answer_tables()
        lines += ["", f"Report:     {self.path('report.md')}", f"Artefacts:  {self.output_dir}",
                  f"SavedModel: {self.export_path}",
                  f"Serve it:   python -m serving --rest_api_port=8501 --model_name=kerasbert "
                  f"--model_base_path={os.path.abspath(self.args.export_base)}",
                  f"Total time: {_minutes(time.perf_counter() - self.started)}"]
        return "\n".join(lines)
