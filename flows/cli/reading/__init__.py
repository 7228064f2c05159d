"""The commands that read what campaigns stored: ``status``, ``report``, ``sql``, ``export`` (rows or a model
folder), ``track``/``publish`` and ``gate plan|replay``."""
