"""Hostile inputs and differential fuzzing.

`hostile`  builders of valid but extreme modules (many kernels, long straight-line kernels, deep
           nesting, huge tiles), for the scaling bench and the robustness tests;
`mutate`   structure-aware mutations of bytecode files (fields found by tracing the reader);
`differ`   runs a mutant through our tools and an oracle's, and classifies the difference.

Nothing in the compiler imports this package.  The oracle (NVIDIA's tileiras/tileirdisasm) is
given by the caller: tests and scripts find it, this package only runs what it is handed.
"""
