# Sourced by bench/gpu.sh and bench/gpu_serve.sh. An AOTInductor CUDA package segfaults on load on the GPU image
# (std::regex in the package's wrapper, a locale facet call) unless the system libstdc++ is loaded first; preloaded,
# it loads and runs (export, bench, tritonserver and its stubs).
libstdcxx=/usr/lib/x86_64-linux-gnu/libstdc++.so.6
if [ -f "$libstdcxx" ]; then export LD_PRELOAD="$libstdcxx${LD_PRELOAD:+:$LD_PRELOAD}"; fi
