"""List the ops a SavedModel's graphs use and check the stock TF Serving binary has each.

    python -m pipelines.audit_ops saved_models/kerasbert/1 [--table]

Every op of every function in the SavedModel's library (not only the signatures' top
graphs) must be a TensorFlow op or one of TF Text's `ops_lib`, the ops `tensorflow_model_server`
links (its model_servers/BUILD: "@org_tensorflow_text//tensorflow_text:ops_lib"). Prints
one line (how many ops of each origin, TF Text's by name; --table: every op a line), and an
`error:` line for each op from anywhere else (a custom op library, tf.py_function's
EagerPyFunc), then exits 2. `pipelines.export` runs the same check on every export.
"""

import sys

from pipelines.common import main_guard, pipeline_parser


def main(argv=None) -> int:
    parser = pipeline_parser("python -m pipelines.audit_ops", __doc__)
    parser.add_argument("saved_model", help="A SavedModel folder (one version: saved_model.pb, variables/).")
    parser.add_argument("--table", action="store_true",
                        help="Also list every op a line: its origin, name, and how many functions use it.")
    args = parser.parse_args(argv)

    def run():
        from kerasbert.op_audit import check_servable_ops
        try:
            audit = check_servable_ops(args.saved_model)
        except FileNotFoundError as missing:
            raise FileNotFoundError(f"{args.saved_model}: no saved_model.pb ({missing.strerror})") from None
        if args.table:
            print(audit.table())
        print(audit.summary())

    return main_guard(run, verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
