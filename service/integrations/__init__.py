"""What a study gives to tools beside hpsearch: the experiment tracker (``tracking``, MLflow)
and a single trial as a torchrun job (``torchrun``, ``hpsearch export-trial``). Only the CLI
and the Python API reach them, and each loads its tool only when asked to use it."""
