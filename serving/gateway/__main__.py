"""``python -m serving.gateway``: the OpenAI and TEI routes over a running tritonserver (foreground; SIGTERM drains)."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys

import uvicorn

from serving.gateway import app
from serving.gateway.config import GatewayConfig, parse_args
from serving.gateway.state import Gateway, encoder_of, fronted_models, load_repository
from serving.gateway.triton import CLASSIFY_MODEL, RERANK_MODEL, Triton
from serving.launcher.replicas import read_api_keys

log = logging.getLogger("serving.gateway")


def serve(cfg: GatewayConfig) -> None:
    log.info("gateway config: %s", cfg)
    keys = read_api_keys(cfg.api_keys) if cfg.api_keys else None
    fronted = fronted_models(cfg.repository, cfg.model, RERANK_MODEL, CLASSIFY_MODEL)
    if fronted.get("embed", cfg.model) != cfg.model:  # the repository's embedder has a name of its own
        cfg = dataclasses.replace(cfg, model=fronted["embed"], encoder=encoder_of(cfg.repository, fronted["embed"]))
    log.info("routes call: %s", ", ".join(f"{task} -> {m}" for task, m in fronted.items()) or cfg.model)
    triton = Triton(
        cfg.triton_url,
        cfg.model,
        cfg.encoder,
        fronted.get("rerank", RERANK_MODEL),
        fronted.get("classify", CLASSIFY_MODEL),
    )
    gw = Gateway(cfg, triton, keys, fronted=fronted)
    gw.tokenizers, gw.manifests = load_repository(cfg.repository, [model for _, model in gw.served])
    server = uvicorn.Server(
        uvicorn.Config(
            app.create(gw),
            host=cfg.host,
            port=cfg.port,
            loop="uvloop",
            http="httptools",
            lifespan="on",
            access_log=False,
            log_level="warning",
            timeout_graceful_shutdown=cfg.exit_timeout_s,
        )
    )
    log.info("OpenAI and TEI routes on http://%s:%d over %s", cfg.host, cfg.port, cfg.triton_url)
    server.run()


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # /tokenize's texts are few: no thread pool on 2 cores
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        serve(parse_args(argv))
    except ValueError as e:
        log.error("%s", e)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
