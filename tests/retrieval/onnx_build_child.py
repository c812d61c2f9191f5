"""A child building MiniLM's ONNX file: ``onnx_build_child.py CACHE_DIR``.

It says ``ready`` once everything is imported, waits for the parent's go (so two children race
for the build), then says ``built PATH`` if it exported the file itself or ``found PATH`` if
another process had.
"""

import logging
import sys
from pathlib import Path

from child_process import say, wait_for_go

from retrieval.onnx_export import ensure_onnx_model
from retrieval.sentence_transformer import packaged_model_path


class Exports(logging.Handler):
    """Counts the exports this process made (``ensure_onnx_model`` logs each)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += record.getMessage().startswith("exported ")


def main(cache_dir: str) -> None:
    exports = Exports()
    logging.getLogger("retrieval.onnx_export").addHandler(exports)
    logging.getLogger("retrieval.onnx_export").setLevel(logging.INFO)
    import torch  # noqa: F401  (imported before the go: the race is about the build)

    wait_for_go()
    path = ensure_onnx_model(packaged_model_path(), Path(cache_dir))
    say(f"{'built' if exports.count else 'found'} {path}")


if __name__ == "__main__":
    main(*sys.argv[1:])
