"""Stage 2 of math verification: exact comparison in the caller's process (``compare``), and the sympy
equivalence it hands off (``symbolic``) to SIGKILLable worker processes with a reply cache (``cas``)."""
