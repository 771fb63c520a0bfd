"""Training output that goes to a file or a pipe is plain lines: no carriage returns, no
terminal colour codes."""

import io

from kerasbert.training.progress import fit_output
from helpers import batches, start_run


def test_progress_off_a_terminal_is_plain_lines(tmp_path, capsys):
    run, model, data = start_run(tmp_path, batches())
    run.fit(model, data)
    out = capsys.readouterr().out
    assert "\r" not in out and "\x1b[" not in out and "\b" not in out
    lines = [line for line in out.splitlines() if line.startswith("step ")]
    assert [line.split(":")[0].rsplit(" ", 1)[0] for line in lines] == [
        "step 3/9 (block 1/3)", "step 6/9 (block 2/3)", "step 9/9 (block 3/3)"]
    assert "loss " in lines[-1]


def test_a_terminal_keeps_keras_progress_bar():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    assert fit_output(1, Terminal()) == (1, [])
    assert fit_output(0, io.StringIO()) == (0, [])
    verbose, callbacks = fit_output(1, io.StringIO())
    assert verbose == 0 and len(callbacks) == 1
