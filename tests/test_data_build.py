"""`gauntlet data build|verify`: generated text through a real tokenizer into shards the validator reads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from scoring.corpus import generate_text
from scoring.data import MANIFEST_NAME, Dataset
from tests.cli_fixtures import assert_one_line, call

EOS = "<|endoftext|>"


@pytest.fixture(scope="module")
def docs() -> list[str]:
    text = generate_text(60_000, seed=3)
    return [text[i : i + 1500] for i in range(0, len(text), 1500)]


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory: pytest.TempPathFactory, docs: list[str]) -> Path:
    """A small byte-level BPE trained offline on the corpus itself, saved as the subnet would ship it."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


@pytest.fixture
def inputs(tmp_path: Path, docs: list[str]) -> Path:
    """The same documents as JSONL, Parquet and plain files, in one folder."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path / "text"
    root.mkdir()
    third = len(docs) // 3
    with (root / "a.jsonl").open("w") as f:
        for d in docs[:third]:
            f.write(json.dumps({"text": d, "id": 1}) + "\n")
    pq.write_table(pa.table({"text": docs[third : 2 * third]}), root / "b.parquet")
    for i, d in enumerate(docs[2 * third :]):
        (root / f"c{i:03d}.txt").write_text(d)
    return root


def build(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    result = call(["data", "build", *args], capsys)
    assert result.code == 0, result.err
    report: dict[str, object] = json.loads(result.out)
    return report


def test_build_tokenizes_every_format_into_readable_shards(
    tmp_path: Path, inputs: Path, tokenizer_json: Path, docs: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ds"
    report = build(
        [str(inputs), "--tokenizer", str(tokenizer_json), "--out", str(out), "--shard-tokens", "4000"], capsys
    )
    tok = Tokenizer.from_file(str(tokenizer_json))
    expected = sum(len(tok.encode(d, add_special_tokens=False).ids) + 1 for d in docs)
    assert report["tokens"] == expected and report["files"] == 2 + (len(docs) - 2 * (len(docs) // 3))
    assert report["vocab_size"] == tok.get_vocab_size() and report["dtype"] == "uint16"
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert len(manifest["shards"]) == report["shards"] == -(-expected // 4000)
    dataset = Dataset.open(out, seq_len=64)
    assert dataset.verify() == [] and dataset.n_pages > 10
    # the stream is the documents in order, each ended by the separator: decode the first back
    stream = np.concatenate([np.fromfile(out / s["file"], dtype="<u2") for s in manifest["shards"]])
    eos = tok.token_to_id(EOS)
    assert int((stream == eos).sum()) == len(docs)
    first = stream[: int(np.argmax(stream == eos))].tolist()
    assert tok.decode(first) == docs[0]
    verified = call(["data", "verify", str(out), "--tokenizer", str(tokenizer_json)], capsys)
    assert verified.code == 0 and json.loads(verified.out)["tokens"] == expected


def test_verify_names_a_changed_shard_and_a_foreign_tokenizer(
    tmp_path: Path, inputs: Path, tokenizer_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ds"
    build([str(inputs / "a.jsonl"), "--tokenizer", str(tokenizer_json), "--out", str(out)], capsys)
    other = Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>"))
    other.save(str(tmp_path / "other.json"))
    foreign = call(["data", "verify", str(out), "--tokenizer", str(tmp_path / "other.json")], capsys)
    assert_one_line(foreign, 1, "2 ids", "vocab_size")
    shard = out / "shard_00000.bin"
    data = bytearray(shard.read_bytes())
    data[10] ^= 1
    shard.write_bytes(bytes(data))
    assert_one_line(call(["data", "verify", str(out)], capsys), 1, "digest differs", "shard_00000.bin")
    assert_one_line(call(["data", "verify", str(tmp_path)], capsys), 1, "manifest.json is missing")


def test_build_refusals_are_one_line(
    tmp_path: Path, inputs: Path, tokenizer_json: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ds"
    tok = ["--tokenizer", str(tokenizer_json), "--out", str(out)]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"body": "no text field"}\n')
    assert_one_line(call(["data", "build", str(bad), *tok], capsys), 1, "bad.jsonl:2", "'text'")
    assert not (out / MANIFEST_NAME).exists()  # a failed build leaves no dataset behind
    assert_one_line(
        call(["data", "build", str(inputs / "a.jsonl"), *tok, "--eos", "<nope>"], capsys),
        1,
        "<nope>",
        "--eos",
    )
    assert_one_line(call(["data", "build", str(tmp_path / "absent"), *tok], capsys), 1, "no such file")
    no_tok = ["--tokenizer", str(tmp_path / "absent.json"), "--out", str(out)]
    assert_one_line(call(["data", "build", str(inputs), *no_tok], capsys), 1, "no tokenizer")
    build([str(inputs / "a.jsonl"), *tok], capsys)
    assert_one_line(call(["data", "build", str(inputs / "a.jsonl"), *tok], capsys), 1, "--force")
    again = build([str(inputs / "b.parquet"), *tok, "--force"], capsys)
    assert Dataset.open(out, seq_len=16).manifest.shards[0].n_tokens == again["tokens"]


def test_progress_counts_every_input_byte(tmp_path: Path, inputs: Path, tokenizer_json: Path) -> None:
    """The bar's total is the inputs' size; the build advances it to (about) that total."""
    from validator.cli.data_build import BuildConfig, build_dataset, input_files, load_tokenizer

    files = input_files([inputs])
    seen: list[int] = []
    build_dataset(files, load_tokenizer(tokenizer_json), tmp_path / "ds", BuildConfig(), seen.append)
    total = sum(f.stat().st_size for f in files)
    assert total - 8 <= sum(seen) <= total  # Parquet advances per record batch, rounded down
    assert len(seen) > len(files)  # JSONL advances line by line, not only at the end
