"""The one line rule (mhfast.files.lines): records end at "\\n" only ("\\r\\n" tolerated); every other
character, Unicode line/paragraph separators, NEL, form feed and lone "\\r" included, stays inside its
record; bad UTF-8 is one error naming the file, line and byte column."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mhfast.files import read_records, split_records

# every character str.splitlines splits at, besides "\n"
SEPARATORS = ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("sep", SEPARATORS)
def test_separators_stay_inside_their_line(sep):
    data = f"ein{sep}hund\n{sep}zwei katzen\n{sep}{sep}x\n".encode("utf-8")
    assert split_records(data, "--input") == [f"ein{sep}hund", f"{sep}zwei katzen", f"{sep}{sep}x"]
    assert f"ein{sep}hund".splitlines() != [f"ein{sep}hund"]  # what str.splitlines did


@pytest.mark.parametrize("data,records", [
    (b"", []), (b"\n", [""]), (b"\n\n", ["", ""]), (b"a", ["a"]), (b"a\nb", ["a", "b"]), (b"a\n\nb\n", ["a", "", "b"]),
    (b"a\r\nb\r\n", ["a", "b"]), (b"a\r\r\n", ["a\r"]), (b"a\rb\r\n", ["a\rb"]), (b"\xef\xbb\xbfa\n", ["a"]),
    (b"a\xef\xbb\xbf\n", ["a\ufeff"]), (b"a\x00b\n", ["a\x00b"]),
])
def test_split_records_edges(data, records):
    assert split_records(data, "x") == records


records_strategy = st.lists(
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"), max_size=12)
    .filter(lambda r: not r.endswith("\r")), max_size=8)


@settings(max_examples=200, deadline=None)
@given(records=records_strategy, crlf=st.booleans(), final=st.booleans())
def test_join_then_split_gives_the_records_back(records, crlf, final):
    """Any records (no "\\n", not ending in "\\r", the first not starting with a BOM), joined by "\\n"
    or "\\r\\n", with or without a final terminator, split back into exactly themselves."""
    if records and records[0].startswith("\ufeff"):
        records[0] = "x" + records[0]
    end = "\r\n" if crlf else "\n"
    text = end.join(records)
    if records and (final or records[-1] == ""):  # an empty last record needs its terminator
        text += end
    assert split_records(text.encode("utf-8"), "x") == records


@pytest.mark.parametrize("data,line,column,byte", [
    (b"ok\nstill ok\nbad \xff here\n", 3, 5, "0xff"),
    (b"\xc3", 1, 1, "0xc3"),                     # a truncated two-byte character at the end
    (b"a\nb\n\xed\xa0\x80\n", 3, 1, "0xed"),     # an encoded surrogate is not UTF-8
    (b"\xfe\xff\x00a", 1, 1, "0xfe"),            # UTF-16 with its byte order mark
])
def test_bad_utf8_names_file_line_and_column(tmp_path, data, line, column, byte):
    path = tmp_path / "src.de"
    path.write_bytes(data)
    with pytest.raises(ValueError) as e:
        read_records(path, "--input")
    message = str(e.value)
    assert f"--input {str(path)!r}: line {line}: not valid UTF-8 (byte {byte} at byte column {column})" in message
    assert "\n" not in message


def test_missing_file_names_the_option(tmp_path):
    with pytest.raises(FileNotFoundError, match="--ref: no such file"):
        read_records(tmp_path / "missing", "--ref")


def test_sample_init_file_and_evaluate_use_the_rule(tmp_path, capsys):
    import sacrebleu

    from mhfast.cli import main
    from mhfast.commands.sample import read_sequences

    seqs = tmp_path / "seqs.txt"
    seqs.write_bytes("EVQL\rVESG\r\nQVQL\x85QESG\n".encode("utf-8"))
    assert [r.text for r in read_sequences(str(seqs))] == ["EVQL\rVESG", "QVQL\x85QESG"]
    hyps = ["a dog\u2028runs .", "two men\x0ctalk .", "a woman sits\x85at a bar ."]
    refs = ["a dog runs .", "two men talk .", "a woman sits at a bar ."]
    h, r = tmp_path / "h.txt", tmp_path / "r.txt"
    h.write_bytes("".join(x + "\n" for x in hyps).encode())
    r.write_bytes("".join(x + "\r\n" for x in refs).encode())
    assert main(["evaluate", "--hyp", str(h), "--ref", str(r)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("3 sentences") and f"BLEU = {sacrebleu.corpus_bleu(hyps, [refs]).score:.2f}" in out
    r.write_bytes(b"a dog runs .\ntwo men\xe4 talk .\n")
    assert main(["evaluate", "--hyp", str(h), "--ref", str(r)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--ref" in err and "line 2: not valid UTF-8" in err
