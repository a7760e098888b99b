"""Training in the app and on the command line: ``trainer`` (a run: model, optimizer, schedule, held-out
evaluation, snapshots), ``tasks`` (generated tasks and byte-level language modelling), ``seq2seq``
(the source / target tasks of an encoder-decoder), ``checkpoint`` (safetensors save / load, never
pickle) and ``reproductions/`` (the source texts' results, one module each)."""
