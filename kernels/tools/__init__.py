"""Developer and measurement tools around the kernels: ``aot_check`` (ahead-of-time compile of every
Triton specialisation) and its stamp (``aot_stamp``), ``pipeline_check`` (software pipelining in the
compiled TTGIR), ``measure`` (wall time and peak memory), ``busy`` (was the machine quiet?)."""
