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
- :mod:`.commops` and :mod:`.groups`: other tools' names of ops, dtypes and
  groups, shared by every reader;
- one module per format: :mod:`.kineto` (with :mod:`.kinetoscan`, one
  streaming pass over a file through :mod:`.jsonstream`; :mod:`.kinetoops`,
  what one event says; :mod:`.kinetojoin`, CPU ops joined to kernels), :mod:`.et`,
  :mod:`.deepspeed`, :mod:`.inspector`, and :mod:`.frrun` over
  :mod:`.flight_recorder` (the reader ``commlens doctor`` shares).
"""
