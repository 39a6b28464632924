"""The Python `tokenizer` model's text pairs through the real tritonserver: TEXT and TEXT_PAIR in, ids and
token_type_ids equal to the fast tokenizer's for `[CLS] A [SEP] B [SEP]`, cut as `truncation` says. The default
export serves `tokenizer` natively (single texts), so these run on a copy whose tokenizer is the Python model."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tokenizers import Tokenizer
from tritonclient.utils import InferenceServerException

from reliability import processes
from reliability.copies import python_tokenizer_copy
from tests.integration.conftest import NATIVE_ONLY

pytestmark = [pytest.mark.integration, pytest.mark.skipif(NATIVE_ONLY, reason="the Python stub is not served")]


def _strings(name: str, values: list[bytes]) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, [len(values), 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[v] for v in values], dtype=np.object_))
    return tensor


@pytest.fixture(scope="module")
def triton_server(exported_repository, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pairs")
    with processes.running(python_tokenizer_copy(exported_repository, tmp / "repo"), tmp / "server.log") as server:
        yield server


@pytest.fixture(scope="module")
def reference(exported_repository):
    path = exported_repository / "tokenizer" / "1" / "tokenizer" / "tokenizer.json"
    max_seq = int(
        __import__("json").loads((exported_repository / "tokenizer" / "manifest.json").read_text())["max_seq"]
    )
    return Tokenizer.from_file(str(path)), max_seq


@pytest.mark.parametrize("truncation", ["longest_first", "only_second"])
def test_pairs_give_the_fast_tokenizers_ids_and_type_ids(triton_server, reference, truncation):
    tok, max_seq = reference
    firsts = [b"a short question?", b"another one", b"word " * 20]
    seconds = [b"its answer.", b"long " * 400, b"and a second text"]
    result = grpcclient.InferenceServerClient(triton_server.grpc_url).infer(
        "tokenizer", [_strings("TEXT", firsts), _strings("TEXT_PAIR", seconds)], parameters={"truncation": truncation}
    )
    ids, types, mask = (result.as_numpy(n) for n in ("input_ids", "token_type_ids", "attention_mask"))
    tok.enable_truncation(max_seq, strategy=truncation)
    for row, (a, b) in enumerate(zip(firsts, seconds, strict=True)):
        enc = tok.encode(a.decode(), b.decode())
        n = int(mask[row].sum())
        assert ids[row, :n].tolist() == enc.ids and types[row, :n].tolist() == enc.type_ids
    assert result.as_numpy("truncated").reshape(-1).tolist() == [False, True, False]


def test_a_single_text_has_type_ids_zero_and_a_bad_pair_its_message(triton_server):
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    result = client.infer("tokenizer", [_strings("TEXT", [b"just one text"])])
    assert not result.as_numpy("token_type_ids").any()
    with pytest.raises(InferenceServerException, match="batch size does not match"):  # Triton's own check
        client.infer("tokenizer", [_strings("TEXT", [b"a", b"b"]), _strings("TEXT_PAIR", [b"c"])])
    with pytest.raises(InferenceServerException, match="truncation must be one of longest_first, only_second"):
        client.infer(
            "tokenizer", [_strings("TEXT", [b"a"]), _strings("TEXT_PAIR", [b"c"])], parameters={"truncation": "x"}
        )
    with pytest.raises(InferenceServerException, match="the first text fills the max length"):
        client.infer(
            "tokenizer", [_strings("TEXT", [b"word " * 400]), _strings("TEXT_PAIR", [b"c"])],
            parameters={"truncation": "only_second"},
        )  # fmt: skip
