"""A child building one of MiniLM's ONNX files: ``model_build_child.py onnx CACHE_DIR`` exports
the fp32 file into a cache folder, ``model_build_child.py int8 FP32_FILE`` quantizes that file.

It says ``ready`` once everything is imported, waits for the parent's go (so two children race
for the build), then says ``built PATH`` if it built the file itself or ``found PATH`` if
another process had.
"""

import logging
import sys
from pathlib import Path

from child_process import say, wait_for_go

from retrieval.onnx_export import ensure_onnx_model
from retrieval.onnx_int8 import ensure_int8_model
from retrieval.sentence_transformer import packaged_model_path


class Builds(logging.Handler):
    """Counts the files this process made (each ``ensure_*`` logs what it built)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += record.getMessage().startswith(("exported ", "quantized "))


def main(kind: str, where: str) -> None:
    builds = Builds()
    for name in ("retrieval.onnx_export", "retrieval.onnx_int8"):
        logging.getLogger(name).addHandler(builds)
        logging.getLogger(name).setLevel(logging.INFO)
    # Imported before the go: the race is about the build.
    import onnxruntime.quantization  # noqa: F401
    import torch  # noqa: F401

    wait_for_go()
    if kind == "int8":
        path = ensure_int8_model(Path(where), packaged_model_path())
    else:
        path = ensure_onnx_model(packaged_model_path(), Path(where))
    say(f"{'built' if builds.count else 'found'} {path}")


if __name__ == "__main__":
    main(*sys.argv[1:])
