"""The model repository's contract, read by the launcher, the backends' Python side and export alike: manifests and
their verification, the artifact files and how a torch artifact is loaded, and the processor a package was tuned for, the native
backend's name."""
