"""Named entities and question answering from training to a served answer, in a few
minutes (what `make demo-tasks` runs):

    1 fine-tune  MiniLM on a slice of CoNLL-2003 (finetune_ner_tiny.json) and of SQuAD
                 (finetune_squad_tiny.json), one run each, in this process
    2 export     each run's SavedModel: <output_dir>/export/ner/<N>, .../squad/<N>
    3 serve      `python -m serving` on 127.0.0.1 with both models (a models.config), then
                 `entities` and `answer` over REST (row and columnar formats) and gRPC; the
                 three answers must equal the SavedModel's called in this process
    4 print      the entities and answers, with their character offsets

    python -m pipelines.demo_tasks [--output_dir runs/demo-tasks] [--data_dir ../shared/data]
    python -m pipelines.demo_tasks --set train.total_steps=8 --set data.max_train_examples=64   # a quicker look

A finished run or export in --output_dir is reused (`--overwrite` trains again).
"""

import json
import os
import sys

from pipelines.common import config_path, data_dir, main_guard, output_folder, pipeline_parser

TASKS = {"ner": "entities", "squad": "answer"}
TEXTS = ["Peter Blackburn flew from Brussels to London for the European Commission .",
         "Germany 's representative to the European Union , Werner Zwingmann , said on Wednesday ."]
QUESTIONS = [{"question": "Which band played at the Super Bowl 50 halftime show?",
              "context": "Coldplay headlined the Super Bowl 50 halftime show in Santa Clara, with "
                         "Beyoncé and Bruno Mars as guests."},
             {"question": "When did the Normans conquer England?",
              "context": "The Normans, led by William the Conqueror, conquered England in 1066 after "
                         "the Battle of Hastings."}]


def inputs_of(task: str) -> dict[str, list[str]]:
    """The demo's columnar inputs of a task's signature."""
    if task == "ner":
        return {"text": TEXTS}
    return {"question": [q["question"] for q in QUESTIONS], "context": [q["context"] for q in QUESTIONS]}


def train_and_export(args, task: str) -> str:
    """Fine-tunes the task's tiny config and exports it, in this process (one TensorFlow start
    for the demo); a finished run is reused, and so is its export unless the run is newer.
    Returns the version folder."""
    from kerasbert.config import FinetuneConfig, load_config
    from kerasbert.export import export_saved_model, next_version
    from kerasbert.finetuning.run import run_finetuning
    from kerasbert.models.encoder import minilm_checkpoint

    run_dir, export_base = os.path.join(args.output_dir, task), os.path.join(args.output_dir, "export", task)
    config_file = config_path(f"finetune_{task}_tiny")
    print(f"== {task}: fine-tune {config_file} -> {run_dir}", flush=True)
    run_finetuning(load_config(FinetuneConfig, config_file, args.overrides), args.data_dir, run_dir,
                   minilm_checkpoint(), overwrite=args.overwrite)
    newest = os.path.join(export_base, str(next_version(export_base) - 1))
    if not os.path.isdir(newest) or os.path.getmtime(newest) < os.path.getmtime(os.path.join(run_dir, "metrics.json")):
        newest = export_saved_model(run_dir, export_base)
    print(f"== {task}: SavedModel {newest}", flush=True)
    return newest


def in_process(versions: dict[str, str]) -> dict[str, dict]:
    """Each signature called on the demo's inputs in this process, outputs as JSON values."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the tokenizer's ops

    outputs = {}
    for task, path in versions.items():
        signature = tf.saved_model.load(path).signatures[TASKS[task]]
        result = signature(**{name: tf.constant(values) for name, values in inputs_of(task).items()})
        outputs[task] = json.loads(json.dumps({name: value.numpy().tolist() for name, value in result.items()},
                                              default=lambda b: b.decode("utf-8")))
    return outputs


def rest_rows(server_url: str, signature: str, inputs: dict) -> dict:
    """TF Serving's row format ("instances"), answers turned back into columns."""
    import urllib.request

    instances = [dict(zip(inputs, values)) for values in zip(*inputs.values())]
    request = urllib.request.Request(server_url + ":predict", json.dumps(
        {"signature_name": signature, "instances": instances}).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        rows = json.loads(response.read())["predictions"]
    return {name: [row[name] for row in rows] for name in rows[0]}


def serve_and_query(args, versions: dict[str, str]) -> dict[str, dict]:
    """Serves both exports, queries them three ways; an error if any answer differs from the SavedModel's."""
    from serving.client import ServingClient
    from serving.process import LocalServer

    config = os.path.join(args.output_dir, "models.config")
    with open(config, "w") as f:
        f.write("model_config_list {\n" + "".join(
            f'  config {{ name: "{task}" base_path: "{os.path.abspath(os.path.dirname(path))}" '
            f'model_platform: "tensorflow" }}\n' for task, path in versions.items()) + "}\n")
    expected = in_process(versions)
    answers = {}
    with LocalServer("ner", config_file=config, log_path=os.path.join(args.output_dir, "server.log")) as server:
        for task, path in versions.items():
            server.model_name = task
            server.wait_for_version(int(os.path.basename(path)))
            ways = {
                "REST columnar": ServingClient(task, rest_port=server.rest_port, timeout=120).predict(
                    TASKS[task], inputs_of(task)),
                "REST rows": rest_rows(server.url(), TASKS[task], inputs_of(task)),
                "gRPC": ServingClient(task, grpc_port=server.grpc_port, protocol="grpc", timeout=120).predict(
                    TASKS[task], inputs_of(task))}
            for way, got in ways.items():
                check_equal(task, way, got, expected[task])
            answers[task] = expected[task]
    return answers


def check_equal(task: str, way: str, got: dict, expected: dict) -> None:
    for name, value in expected.items():
        same = all(abs(a - b) < 1e-5 for a, b in zip(flat(got[name]), flat(value))) if "score" in name \
            else got[name] == value
        if not same:
            raise RuntimeError(f"{task}: {way} answered {name}={got[name]}, the SavedModel {value}")


def flat(value) -> list:
    return [x for v in value for x in flat(v)] if isinstance(value, list) else [value]


def show(answers: dict[str, dict]) -> None:
    entities = answers["ner"]
    for row, text in enumerate(TEXTS):
        found = [f"{entities['entity_text'][row][i]!r} {entities['entity_type'][row][i]} "
                 f"[{entities['entity_start'][row][i]}:{entities['entity_end'][row][i]}]"
                 for i in range(entities["num_entities"][row])]
        print(f"   entities  {text!r}\n             -> {', '.join(found) or '(none)'}")
    answer = answers["squad"]
    for row, q in enumerate(QUESTIONS):
        print(f"   answer    {q['question']!r}\n             -> {answer['answer'][row]!r} "
              f"[{answer['answer_start'][row]}:{answer['answer_end'][row]}] score {answer['score'][row]:.3f}")
    print("   (REST row and columnar formats and gRPC gave the same answers as the SavedModel in-process)")


def main(argv=None) -> int:
    from kerasbert.data.corpus import default_data_dir

    parser = pipeline_parser("python -m pipelines.demo_tasks", __doc__)
    parser.add_argument("--data_dir", default=default_data_dir(), type=data_dir,
                        help="Folder holding conll2003/ and squad/ (default: $KERASBERT_DATA_DIR or ../shared/data).")
    parser.add_argument("--output_dir", default="runs/demo-tasks", type=output_folder,
                        help="Folder for the runs, exports, models.config and server.log.")
    parser.add_argument("--overwrite", action="store_true", help="Train both runs again from scratch.")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="Override a field of both runs' configs, e.g. train.total_steps=8. Repeatable.")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)

    def demo():
        from serving.process import stop_on_sigterm

        stop_on_sigterm()
        os.makedirs(args.output_dir, exist_ok=True)
        versions = {task: train_and_export(args, task) for task in TASKS}
        show(serve_and_query(args, versions))
        print("Serve them: python -m serving --rest_api_port=8501 --model_config_file="
              + os.path.abspath(os.path.join(args.output_dir, "models.config")))

    return main_guard(demo, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
