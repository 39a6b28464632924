"""The native backend as the model repository names it: the ``backend`` a model's config gives, and the runtimes
(the manifest's ``runtime``) that backend loads. Export writes these, the launcher and the backend read them; where
the library is built and how the launcher installs it is the launcher's business (serving/launcher/native.py)."""

from __future__ import annotations

NAME = "bertserve"
# The runtimes the backend can load (the manifest names one); an ExportedProgram needs Python.
RUNTIMES = ("aoti", "torchscript")
