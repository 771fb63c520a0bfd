"""Task file and corpus readers: quoting, damaged rows, bad files."""

import os

import pytest

from kerasbert.data.corpus import load_corpus, read_imdb, read_plain_text, read_wikitext
from kerasbert.data.task_files import DataError, read_task_file
from kerasbert.data.cleaning import unquote_twice_quoted

from conftest import DATA_DIR

QUORA_HEADER = "\tid\tsentence1\tsentence2\tis_duplicate\n"
QUORA_ROWS = (
    '7\taaa\t"""What does """"69"""" mean?"""\tWhat is 69?\t1.0\n'
    "8\tbbb\tHow do I cook?\tHow to cook?\t0.0\n"
)
QUORA_DAMAGED = (
    '9\tccc\t"""Broken question?"\t\t\n'  # damaged as in the shared file: cut, label empty
)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_quora_double_quoting_float_labels_and_damaged_row(tmp_path):
    result = read_task_file("para", write(tmp_path, "q.tsv", QUORA_HEADER + QUORA_ROWS * 10 + QUORA_DAMAGED))
    assert result.skipped == 1 and len(result.examples) == 20
    assert result.examples[0].text_a == 'What does "69" mean?'
    assert [e.label for e in result.examples[:2]] == [1, 0]


def test_unquote_leaves_unbalanced_text_alone():
    assert unquote_twice_quoted('"Broken question') == '"Broken question'
    assert unquote_twice_quoted('"a ""b"" c"') == 'a "b" c'


def test_sst_ptb_escapes_and_leading_space(tmp_path):
    text = "\tid\tsentence\tsentiment\n0\tx1\t -LRB- a \\/ b -RRB- `` c ''\t4\n"
    example = read_task_file("sst", write(tmp_path, "s.tsv", text)).examples[0]
    assert example.text_a == '( a / b ) " c "' and example.label == 4


def test_glue_layouts(tmp_path):
    sst2 = write(tmp_path, "sst2.tsv", "sentence\tlabel\nit is good \t1\nbad\t0\n")
    qqp = write(tmp_path, "qqp.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                                     "1\t1\t2\tA?\tB?\t1\n")
    stsb = write(tmp_path, "stsb.tsv", "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\t"
                                       "sentence1\tsentence2\tscore\n"
                                       "0\tmain\tf\t2012\t1\tnone\tnone\tA man.\tA person.\t4.750\n")
    assert [e.label for e in read_task_file("sst2", sst2).examples] == [1, 0]
    # SST-2's binary labels are not SST-5's classes: the 5-class task refuses the file, naming sst2.
    with pytest.raises(DataError, match=r"sst2.tsv:1: a glue-layout header; it is task 'sst2''s layout "
                                        r"\(SST-2\), but task 'sst' \(SST-5\) is read only from cs224n files"):
        read_task_file("sst", sst2)
    assert read_task_file("para", qqp).examples[0].text_b == "B?"
    assert read_task_file("sts", stsb).examples[0].label == 4.75


def test_empty_text_and_empty_labels_are_skipped_a_label_of_no_class_is_an_error(tmp_path):
    good = "".join(f"{i}\tid{i}\tsentence {i}\t{i % 5}\n" for i in range(20))
    text = "\tid\tsentence\tsentiment\n" + good + "20\tid20\t \t1\n21\tid21\tok\t\n"
    result = read_task_file("sst", write(tmp_path, "s.tsv", text))
    assert len(result.examples) == 20 and result.skipped == 2
    with pytest.raises(DataError, match=r"s.tsv:24: column 'sentiment': label '7' is not one of task 'sst''s "
                                        r"classes \['0', '1', '2', '3', '4'\]$"):
        read_task_file("sst", write(tmp_path, "s.tsv", text + "22\tid22\tok\t7\n"))


def test_mostly_damaged_file_is_an_error_naming_file_and_line(tmp_path):
    text = "\tid\tsentence1\tsentence2\tsimilarity\n0\ta\tx\ty\tinf\n1\tb\tx\ty\t2.5\n"
    with pytest.raises(DataError, match=r"s.tsv:2: 1 of 2 rows are damaged"):
        read_task_file("sts", write(tmp_path, "s.tsv", text))


def test_missing_columns_missing_file_and_bad_utf8(tmp_path):
    # The task by its name, not its declaration's repr.
    with pytest.raises(DataError, match=r"x.tsv:1: header lacks column\(s\) \['sentence1', 'sentence2', 'similarity'\] "
                                        r"for task 'sts' \(cs224n layout\). Header: \['', 'id', 'sentence'\]$"):
        read_task_file("sts", write(tmp_path, "x.tsv", "\tid\tsentence\n0\ta\tb\n"))
    # A corpus given as a path that is not there: the file is named, not taken for a corpus name.
    with pytest.raises(DataError, match=r"^my/corpus.txt: file not found \(a corpus is the path of a text file"):
        load_corpus("my/corpus.txt", DATA_DIR)
    with pytest.raises(DataError, match="file not found"):
        read_task_file("sst", str(tmp_path / "absent.tsv"))
    bad = tmp_path / "bad.tsv"
    bad.write_bytes(b"\tid\tsentence\tsentiment\n0\ta\tok\t1\n1\tb\t\xff\xfe\t2\n")
    with pytest.raises(DataError, match=r"bad.tsv:3: not valid UTF-8"):
        read_task_file("sst", str(bad))


def test_plain_text_corpus_errors(tmp_path):
    with pytest.raises(DataError, match="empty corpus"):
        read_plain_text(write(tmp_path, "empty.txt", "\n \n"))
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"Fine line.\n\nBad \xc3\x28 byte.\n")
    with pytest.raises(DataError, match=r"bad.txt:3: not valid UTF-8"):
        read_plain_text(str(bad))


@pytest.mark.skipif(not os.path.isdir(DATA_DIR), reason="shared data not present")
def test_shared_files_parse_as_documented():
    assert len(read_wikitext(os.path.join(DATA_DIR, "wikitext-2", "test.txt"))) == 60
    quora = read_task_file("para", os.path.join(DATA_DIR, "cs224n", "quora-train.tsv"))
    assert (len(quora.examples), quora.skipped) == (15999, 1)
    sts = read_task_file("sts", os.path.join(DATA_DIR, "cs224n", "sts-dev.tsv"))
    assert (len(sts.examples), sts.skipped) == (863, 0)
    assert len(load_corpus("sst", DATA_DIR)) > 8000


def sst_rows(count):
    return ["\tid\tsentence\tsentiment"] + [f"{i}\tid{i}\tsentence number {i} .\t{i % 5}" for i in range(count)]


def test_a_stray_quote_damages_its_own_row_only(tmp_path):
    """Whole-file csv parsing let one `"` merge the next 190 rows into one field."""
    lines = sst_rows(200)
    lines[11] = '10\tid10\t"a quote opened and never closed\t2'
    lines[50] = "49\tid49\tan infinite label\tinf"
    lines[60] = "59\tid59\ta label past float's range\t1e400"
    lines[70] = f"69\tid69\t\"{'long ' * 40_000}\"\t3"  # 200 KB quoted: read (csv's limit was 128 KiB)
    lines[80] = f"79\tid79\t{'x' * (2 << 20)}\t3"  # 2 MiB: damaged
    result = read_task_file("sst", write(tmp_path, "s.tsv", "\n".join(lines) + "\n"))
    assert result.skipped == 4 and len(result.examples) == 196
    assert [e.uid for e in result.examples[9:11]] == ["id9", "id11"]
    assert result.examples[66].uid == "id69" and len(result.examples[66].text_a) == 5 * 40_000 - 1


def test_damaged_rows_are_logged_with_line_and_reason_first_five_only(tmp_path, caplog):
    lines = sst_rows(200)
    for i in range(2, 20, 2):
        lines[i] = f"{i}\tid{i}\ttext\tnan"
    with caplog.at_level("WARNING"):
        read_task_file("sst", write(tmp_path, "s.tsv", "\n".join(lines)))
    messages = [record.getMessage() for record in caplog.records]
    assert messages[0].endswith("s.tsv:3: skipped damaged row (label 'nan' is not a finite number)")
    assert len(messages) == 6 and messages[-1].endswith("s.tsv: 4 more damaged rows skipped")


def test_glue_text_keeps_its_quotes(tmp_path):
    """GLUE's TSVs are not quoted: a text that starts with `"` is text, as GLUE's reader takes it."""
    sst2 = write(tmp_path, "sst2.tsv", 'sentence\tlabel\n"quoted" words \t1\n"open quote\t0\n')
    assert [e.text_a for e in read_task_file("sst2", sst2).examples] == ['"quoted" words', '"open quote']


def test_imdb_reader_counts_damaged_rows(tmp_path):
    header = "\tid\tsentence\tsentiment\n"
    rows = "".join(f"{i}\tr{i}\tReview {i} is fine. It ends here.\t{i % 2}\n" for i in range(40))
    damaged = '40\tr40\t"never closed. Still going.\t1\n41\tr41\n'  # a stray quote, too few fields
    documents = read_imdb(write(tmp_path, "imdb.tsv", header + rows + damaged))
    assert len(documents) == 40 and documents[0] == ["Review 0 is fine.", "It ends here."]
    with pytest.raises(DataError, match=r"imdb.tsv:3: 40 of 41 rows are damaged; first: 2 fields"):
        read_imdb(write(tmp_path, "imdb.tsv", header + "0\tr0\tok\t1\n" + "1\tr1\n" * 40))


def test_a_review_is_cleaned_the_same_for_pretraining_and_fine_tuning(tmp_path):
    """CFIMDB's escaped quotes: pretraining's corpus reader kept one `"` of each `"" ""` pair."""
    review = '""" Slow and "" "" reality TV "" "" , the soap .<br /><br />It \'s bad . """'
    path = write(tmp_path, "cfimdb.tsv", f'\tid\tsentence\tsentiment\n0\tr0\t"{review.replace(chr(34), 2 * chr(34))}"\t0\n')
    (fine_tuning,) = read_task_file("cfimdb", path).examples
    assert fine_tuning.text_a == 'Slow and " reality TV " , the soap . It \'s bad .'
    assert read_imdb(path) == [["Slow and \" reality TV \" , the soap .", "It 's bad ."]]


def test_a_missing_corpus_file_says_file_not_found(tmp_path):
    with pytest.raises(DataError, match=r"corpus\.txt: file not found"):
        load_corpus(str(tmp_path / "corpus.txt"), "../shared/data")


def csv_rows(count):
    return ["text,label"] + [f"review number {i},{'good' if i % 2 else 'bad'}" for i in range(count)]


def test_a_csv_quote_left_open_counts_every_row_it_swallows(tmp_path):
    from kerasbert.data.task_files import read_training_file
    from kerasbert.tasks import Task

    task = Task("reviews", "classes", text="text", label="label")
    lines = csv_rows(1000)
    lines[100] = '"review number 99 opens a quote,good'  # swallows the 900 rows after it
    path = write(tmp_path, "reviews.csv", "\n".join(lines) + "\n")
    # Counted as one row, this file read as 99 rows of two classes; it is 901 damaged of 1,000.
    with pytest.raises(DataError, match=r"reviews.csv:101: 901 of 1000 rows are damaged; first: not CSV from here"):
        read_training_file(task, path)
    lines = csv_rows(40)
    lines[1:39] = [f"review number {i},good" for i in range(38)]  # one class until the quote left open
    lines[39] = '"the last rows, bad'
    lines += [f"review number {i},bad" for i in range(40, 60)]
    with pytest.raises(DataError, match=r"rows are damaged"):  # not "one class only"
        read_training_file(task, write(tmp_path, "one_class.csv", "\n".join(lines) + "\n"))


def test_a_column_the_task_reads_given_twice_in_the_header_is_an_error(tmp_path):
    from kerasbert.data.task_files import read_training_file
    from kerasbert.tasks import Task

    lines = ["text,label,text"] + [f"review {i},{'good' if i % 2 else 'bad'},other {i}" for i in range(20)]
    with pytest.raises(DataError, match=r"twice.csv:1: column\(s\) \['text'\] appear more than once"):
        read_training_file(Task("reviews", "classes", text="text", label="label"),
                           write(tmp_path, "twice.csv", "\n".join(lines) + "\n"))
    lines = ["text,label,note,note"] + [f"review {i},{'good' if i % 2 else 'bad'},a,b" for i in range(20)]
    task, result = read_training_file(Task("reviews", "classes", text="text", label="label"),
                                      write(tmp_path, "unread.csv", "\n".join(lines) + "\n"))
    assert len(result.examples) == 20  # a column it does not read may repeat


def test_a_training_files_damaged_rows_are_logged_once(tmp_path, caplog):
    from kerasbert.data.task_files import read_training_file
    from kerasbert.tasks import Task

    lines = csv_rows(40) + ["only,three,fields"]
    read_training_file(Task("reviews", "classes", text="text", label="label"), write(tmp_path, "r.csv", "\n".join(lines)))
    assert caplog.text.count("r.csv:42: skipped damaged row (3 fields, the header has 2)") == 1
