"""The project's packages, as the benchmarks name them.

``prepare_phases`` and ``gc_pauses`` import an older tree's packages as a second copy in one
process; ``package_hops`` counts the calls between them. Nothing here imports them, so a
benchmark can read this before it puts an older tree on the path.
"""

#: The top-level packages of stratamem.
PACKAGES = ("memory", "retrieval", "storage")
