"""A child quantizing MiniLM's ONNX file to int8: ``int8_build_child.py FP32_FILE``.

It says ``ready`` once everything is imported, waits for the parent's go (so two children race
for the build), then says ``built PATH`` if it quantized the file itself or ``found PATH`` if
another process had.
"""

import logging
import sys
from pathlib import Path

from child_process import say, wait_for_go

from retrieval.onnx_int8 import ensure_int8_model
from retrieval.sentence_transformer import packaged_model_path


class Builds(logging.Handler):
    """Counts the int8 files this process made (``ensure_int8_model`` logs each)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += record.getMessage().startswith("quantized ")


def main(fp32_file: str) -> None:
    builds = Builds()
    logging.getLogger("retrieval.onnx_int8").addHandler(builds)
    logging.getLogger("retrieval.onnx_int8").setLevel(logging.INFO)
    import onnxruntime.quantization  # noqa: F401  (imported before the go: the race is the build)

    wait_for_go()
    path = ensure_int8_model(Path(fp32_file), packaged_model_path())
    say(f"{'built' if builds.count else 'found'} {path}")


if __name__ == "__main__":
    main(*sys.argv[1:])
