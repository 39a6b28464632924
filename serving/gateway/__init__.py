"""The gateway: OpenAI's ``/v1/embeddings`` and text-embeddings-inference's routes, one ASGI process (uvicorn with
httptools and uvloop, Starlette routes, pydantic schemas, orjson) beside tritonserver, calling ``embed`` over gRPC.
"""
