"""Native `embed` (text in, tokenized in the backend) against the ensemble of the Python tokenizer and bert, in
one run on one server, and the tokenizer alone (native vs the Hugging Face fast tokenizer, one thread).

    python -m bench.native_embed --repository build/test-repository

Serves a linked copy of the repository with the ensemble added as `embed_ensemble`, runs bench.served's cases
alternately (embed-16, ensemble-16, embed-corpus, ensemble-corpus; perf_analyzer at concurrency 1 and 8), then
times the in-process encoder at 1 x 16 tokens and both tokenizers over the shipped corpus. Writes
reports/native-embed.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

from bench import served
from bench.timing import served_artifact_ms
from export import model_configs
from export.repository import file_hashes
from reliability.copies import linked_copy, replace_file
from serving.contract.hardware import cpu_model
from serving.contract.manifest import MANIFEST

log = logging.getLogger("bench.native_embed")
ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "loadtest" / "data" / "corpus.txt"


def write_ensemble(repo: Path, name: str) -> None:
    """Model ``name`` of ``repo`` becomes the ensemble of the Python tokenizer and bert (what export writes for a
    checkpoint whose tokenizer the backend cannot reproduce), listed in the repository's index."""
    manifest = json.loads((repo / "bert" / MANIFEST).read_text())
    shape = model_configs.ServingShape(
        manifest["max_batch"], manifest["max_seq"], manifest["hidden"], 1, "KIND_CPU", 0, "", 16, None
    )
    config = {**model_configs.embed_config(shape), "name": name}
    shutil.rmtree(repo / name, ignore_errors=True)
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(model_configs.render(config))
    files = file_hashes(repo / name)
    (repo / name / MANIFEST).write_text(json.dumps({"model": name, "steps": ["tokenizer", "bert"], "files": files}))
    index = json.loads((repo / "repository.json").read_text())
    index["models"][name] = {"backend": "ensemble"}
    index["ensemble_requires"] = {**index.get("ensemble_requires", {}), name: ["tokenizer", "bert"]}
    replace_file(repo / "repository.json", json.dumps(index, indent=2).encode())


def with_ensemble(src: Path, dst: Path) -> Path:
    """A linked copy of ``src`` (native embed) that also serves the ensemble as embed_ensemble."""
    shutil.rmtree(dst, ignore_errors=True)
    linked_copy(src, dst)
    write_ensemble(dst, "embed_ensemble")
    return dst


def with_delay(repo: Path, name: str, delay_us: int) -> None:
    """A copy of the native ``embed`` as ``name`` whose dynamic batcher waits ``delay_us`` for company."""
    from google.protobuf import text_format

    shutil.copytree(repo / "embed", repo / name, symlinks=True)
    config = model_configs.parse((repo / name / "config.pbtxt").read_text())
    config.name = name
    config.dynamic_batching.max_queue_delay_microseconds = delay_us
    replace_file(repo / name / "config.pbtxt", text_format.MessageToString(config).encode())
    manifest = json.loads((repo / name / MANIFEST).read_text())
    manifest.update(model=name, files=file_hashes(repo / name))
    replace_file(repo / name / MANIFEST, json.dumps(manifest, indent=2).encode())
    index = json.loads((repo / "repository.json").read_text())
    index["models"][name] = dict(index["models"]["embed"])
    replace_file(repo / "repository.json", json.dumps(index, indent=2).encode())


def tokenizer_throughput(repo: Path, rounds: int = 20) -> dict[str, float]:
    """Texts per second over the shipped corpus, one thread: the native tokenizer (through the C surface, one
    call per corpus) and the Hugging Face fast tokenizer (encode per text, and encode_batch on one thread)."""
    os.environ["RAYON_NUM_THREADS"] = "1"
    from tokenizers import Tokenizer

    from tests.unit.backend import native_core

    path = repo / "tokenizer" / "1" / "tokenizer" / "tokenizer.json"
    texts = [line for line in CORPUS.read_text().splitlines() if line.strip()]
    raw = [t.encode() for t in texts]
    hf = Tokenizer.from_file(str(path))
    hf.no_padding()
    hf.enable_truncation(256)
    native = native_core.NativeTokenizer(native_core.load(), path)

    def rate(fn) -> float:
        fn()
        start = time.perf_counter()
        for _ in range(rounds):
            fn()
        return rounds * len(texts) / (time.perf_counter() - start)

    try:
        out = {
            "native": rate(lambda: native.encode(raw, 256)),
            "hf_encode": rate(lambda: [hf.encode(t) for t in texts]),
            "hf_encode_batch_1_thread": rate(lambda: hf.encode_batch(texts)),
        }
    finally:
        native.close()
    return {k: round(v) for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.native_embed", description=__doc__.split("\n")[0])
    p.add_argument("--repository", type=Path, default=Path("model_repository"))
    p.add_argument("--cases", default="embed-16,ensemble-16,embed-corpus,ensemble-corpus")
    p.add_argument("--concurrency", default="1,8")
    p.add_argument("--output-dir", type=Path, default=Path("reports"))
    p.add_argument(
        "--delay-us",
        type=int,
        help="also serve embed with this dynamic-batcher delay as embed_delay (cases delay-16, delay-corpus)",
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    repo = with_ensemble(args.repository, ROOT / "build" / "bench-embed-repository")
    if args.delay_us is not None:
        with_delay(repo, "embed_delay", args.delay_us)
    # In-process figures first: bench.served pins this process to the client CPU.
    result = {
        "encoder_in_process_p50_ms_1x16": round(served_artifact_ms(repo, (16,), 300, "cpu")[16]["p50_ms"], 3),
        "tokenizer_texts_per_s": tokenizer_throughput(repo),
        "cpu": cpu_model(),
    }
    log.info("in process: %s", result)
    served.main(["--repository", str(repo), "--cases", args.cases, "--concurrency", args.concurrency,
                 "--client-cpus", "1", "--label", "native-embed", "--duration-s", "8",
                 "--output-dir", str(args.output_dir)])  # fmt: skip
    (args.output_dir / "native-embed.json").write_text(json.dumps(result, indent=2))
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
