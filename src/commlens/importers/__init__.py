"""Read other tools' communication traces into ordinary commlens runs.

``commlens import SRC... --out RUN`` turns PyTorch profiler (Kineto) traces,
execution traces, Flight Recorder dumps, DeepSpeed comms-logger output and
NCCL Inspector logs into a run directory that every command reads.

- :mod:`.model`: the common in-memory form every reader returns
  (:class:`~.model.ImportedRun`: per-rank ops, step windows, groups, and the
  provenance: what each time field means, what was estimated or is missing);
- :mod:`.registry`: the formats, each a module with ``detect(path) -> bool``
  and ``read(paths, options) -> ImportedRun``;
- :mod:`.sources`: the command line's sources as local files (directories,
  globs, ``.gz``, ``.tar.gz``) with their sha256;
- :mod:`.write`: the common writer, through the run format's own writer
  (:mod:`commlens.trace.writer`), into a temporary directory renamed onto
  ``--out`` at the end;
- :mod:`.clocks`: offsets between hosts from the ends of blocking collectives;
- one module per format: :mod:`.kineto`, :mod:`.et`, :mod:`.deepspeed`,
  :mod:`.inspector` and ``flight_recorder``.
"""
