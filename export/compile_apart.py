"""``python -m export.compile_apart PROGRAM PACKAGE CONFIGS``: compile a saved ExportedProgram into an
AOTInductor package in a fresh process, with the Inductor settings of the JSON object CONFIGS
(``artifacts.compile_aoti`` says which packages need it)."""

from __future__ import annotations

import json
import sys

import torch


def main(argv: list[str]) -> int:
    program, package, configs = argv
    ep = torch.export.load(program)
    with torch.no_grad():
        torch._inductor.aoti_compile_and_package(ep, package_path=package, inductor_configs=json.loads(configs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
