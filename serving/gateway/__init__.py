"""The gateway: OpenAI's ``/v1/embeddings``, Cohere's and Jina's ``/v1/rerank`` and text-embeddings-inference's
routes, one ASGI process beside tritonserver (uvicorn with httptools and uvloop, Starlette routes, pydantic schemas,
orjson), calling the models over gRPC on loopback. The launcher starts it on ``--gateway-port`` (8080) and stops it
on drain.

Why a gateway process. Three designs were weighed on the 2-core CPU box, where the targets are one short text at
c=1 within 0.3 ms of direct KServe HTTP's p50, and at c=8 at least 90 % of its throughput:

- in-process (a Python process hosting ``libtritonserver``): the pinned pytriton wheel ships the library but no
  Python bindings, and tritonserver's HTTP/gRPC frontends live in its binary, not the library: KServe's 8000/8001,
  the launcher's drain and its stub watchdog would all have to be rebuilt around hand-written C bindings;
- a native HTTP front (C++ beside the backend): the fastest in principle, but it means a second HTTP server, JSON
  writer and auth/limits in C++ inside the model process, on the path every request of every protocol shares;
- a gateway process over gRPC: well-kept libraries for HTTP, JSON and validation, nothing new in tritonserver,
  float encoding off every thread that feeds the model.

``make bench-gateway`` (``python -m bench.gateway``) measured it against direct KServe on one started server: one
12-token text a request, interleaved per request at c=1 (1,000 each), 12 rounds of 100 at c=8; Intel Xeon (family 6
model 207, AVX-512 and AMX), 2 vCPUs shared with other jobs, client on the same cores; 2026-12-06,
``reports/gateway-cpu.json``. Paired p50 difference to KServe HTTP (JSON output) at c=1 / throughput against it at c=8:

    /v1/embeddings float         +1.16 ms   76 %     (p50 7.43 ms, p99 91.8 ms)
    /v1/embeddings base64        +0.95 ms   82 %
    TEI /embed                   +0.68 ms   77 %
    /v1/embeddings, no sharing   +1.13 ms   70 %     (--max-calls 0)
    KServe gRPC from Python      -0.60 ms  134 %     (the call the gateway makes)
    KServe HTTP, binary output   -0.65 ms  109 %
    KServe HTTP, JSON output      0         100 %    (p50 6.23 ms, p99 78.7 ms)

The CPU targets (c=1 within +0.3 ms, c=8 at least 90 %) are not met. Per request the gateway spends 0.8-1.0 ms of CPU
beside tritonserver's ~5 ms (``/proc`` times over 1,000 requests), about 0.4 ms of it in the Python gRPC call, which
costs the same carried from a thread or as a future; on two saturated cores that is what the throughput loses, and
sharing calls between concurrent requests (``coalesce``) won back 6 points of it. An earlier run on a busier box
(p50 11.6 ms) gave +0.81 / +0.36 / +0.04 ms at c=1. The gateway was kept: it is correct, its overhead is bounded and
measured, and the remaining cost is the Python process itself, which only the native front would remove. The GPU
targets were not measured.

Modules: ``app`` (the route table), ``schemas`` (request and response bodies), ``openai``, ``cohere`` and ``tei``
(the handlers), ``state`` (what routes share), ``triton`` (the gRPC client side), ``errors``, ``metrics``, ``config``,
``process`` (the launcher's hook).
"""
