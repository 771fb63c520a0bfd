"""Builds TF Serving's `tf_text_regression` test model, which its mirror omits, for `test_tf_text`.

    python tests/tf_text_regression_model.py runs/tfserving-tests/testdata/tf_text_regression/01

TF Serving's testdata/tf_text_regression.README: the model is made by TF Text's
oss_scripts/model_server/save_models.py (removed from tensorflow/text in 59912e6, 2021; its
last version read here). That model is what `test_tf_text`
(tensorflow_model_server_test.py) expects: a default signature taking `x` (float32, [1])
and answering `y` = x + 1 (3.0 for 2.0), computed only after a graph of TF Text ops has run
and checked its own results, so a server without one of them cannot load or answer it. This
one is written anew for that contract: the ops of that script (but SentencePiece's: no model
file ships with tensorflow-text) and the TF Text ops kerasbert's exports use
(FastWordpieceTokenizeWithOffsets, FastBertNormalize; `python -m pipelines.audit_ops`).
`make tfserving-tests` builds it into runs/ and passes it to the shared runner's --testdata.
"""

import sys

import numpy as np
import tensorflow as tf
import tensorflow_text as text


def assert_same(tensor):
    """An op that needs `tensor`: the check the signature's answer waits for."""
    return tf.debugging.assert_equal(tensor, tf.identity(tensor))


def sentence_ops() -> list:
    """Constrained sequences, offsets, spanning trees, normalizing, splitting, Rouge-L."""
    scores = np.array([[10.0, 12.0, 6.0, 4.0], [13.0, 12.0, 11.0, 10.0]], np.float32)
    weights = np.array([[-1, 1, -2, 2, 0], [3, -3, 4, -4, 0], [5, 1, 10, 1, 1],
                        [-7, 7, -8, 8, 0], [0, 1, 2, 3, 0]], np.float32)
    allowed = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 1, 1], [1, 0, 1, 0, 0],
                        [1, 1, 1, 1, 1], [1, 0, 1, 1, 1]], bool)
    sequence = text.viterbi_constrained_sequence(np.stack([scores] * 3), [2, 2, 2], allowed_transitions=allowed,
                                                 transition_weights=weights, use_log_space=True,
                                                 use_start_and_end_states=True)
    _, offsets_map = text.normalize_utf8_with_offsets_map(["株式会社ＫＡＤＯＫＡＷＡ"], "NFKC")
    source_ends = text.find_source_offsets(offsets_map, [[3, 6, 9, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21]])
    tree, _ = text.max_spanning_tree(tf.constant([4, 3]), tf.constant(
        [[[0, 0, 0, 0], [1, 0, 0, 0], [1, 2, 0, 0], [1, 2, 3, 4]],
         [[4, 3, 2, 9], [0, 0, 2, 9], [0, 0, 0, 9], [9, 9, 9, 9]]]))
    normalized = text.normalize_utf8(text.case_fold_utf8(["A String"]))
    split = text.regex_split(["Yo dawg!"], r"\s")
    rouge_l, _, _ = text.metrics.rouge_l(tf.ragged.constant([["captain", "of", "the", "delta", "flight"]]),
                                         tf.ragged.constant([["delta", "air", "lines", "flight"]]))
    return [sequence.to_tensor(), source_ends, tree, normalized, split.to_tensor(), rouge_l]


def tokenizer_ops(vocabulary) -> list:
    """Sentence breaking and the tokenizers (the one kerasbert exports use included);
    `vocabulary`: WordpieceTokenizer's table (made outside the traced function, as a table must be)."""
    fragments, _, _ = text.StateBasedSentenceBreaker().break_sentences_with_offsets(
        [["Welcome to the U.S.! Harry"], ["Wu Tang Clan; ain't nothing"]])
    split_merge = text.SplitMergeTokenizer().tokenize(b"IloveFlume!", [0, 0, 1, 1, 1, 0, 1, 1, 1, 1, 0])
    logits = [[[2.7, -0.3], [4.1, 0.82], [-2.3, 4.3], [3.1, 12.2], [-3.0, 4.7], [2.7, -0.7],
               [0.7, 15.0], [1.6, 23.0], [2.1, 11.0], [0.0, 20.0], [18.0, 0.7]]]  # split if first > second
    from_logits = text.SplitMergeFromLogitsTokenizer().tokenize([b"IloveFlume!"], logits)
    scripts = tf.strings.unicode_script([ord("a"), 0x0411, 0x82B8, ord(",")])  # TensorFlow's, with ICU
    by_script = text.UnicodeScriptTokenizer().tokenize(["a string"])
    whitespace = text.WhitespaceTokenizer().tokenize(["a string"])
    wordpiece = text.WordpieceTokenizer(vocabulary).tokenize(["i am"])
    fast_wordpiece, _, _ = text.FastWordpieceTokenizer(["i", "am", "##s", "[UNK]"], token_out_type=tf.string,
                                                       no_pretokenization=True).tokenize_with_offsets(["ams"])
    bert_normalized = text.FastBertNormalizer(lower_case_nfd_strip_accents=True).normalize(["Hé LLO"])
    shapes = text.wordshape(["a-b", "a\u2010b"], text.WordShape.HAS_PUNCTUATION_DASH)
    return [fragments.to_tensor(), split_merge, from_logits.to_tensor(), scripts, by_script.to_tensor(),
            whitespace.to_tensor(), wordpiece.to_tensor(), fast_wordpiece.to_tensor(), bert_normalized, shapes]


class TfTextOps(tf.Module):
    """y = x + 1, after every op above has run (the contract of test_tf_text)."""

    def __init__(self):
        super().__init__()
        self.vocabulary = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(["i"], [1], tf.string, tf.int64), default_value=-1)

    @tf.function(input_signature=[tf.TensorSpec([1], tf.float32, name="x")])
    def __call__(self, x):
        with tf.control_dependencies([assert_same(t) for t in sentence_ops() + tokenizer_ops(self.vocabulary)]):
            return {"y": tf.add(x, [1.0])}


def main(argv) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    destination = argv[1]
    module = TfTextOps()
    tf.saved_model.save(module, destination, signatures=module.__call__.get_concrete_function())
    answer = tf.saved_model.load(destination).signatures["serving_default"](x=tf.constant([2.0]))["y"]
    print(f"{destination}: y = {answer.numpy().tolist()} for x = [2.0]")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
