"""Stage 1a of math verification: the final answer a completion states (``extract``), from its labelled answer
lines (``lines``), the prose around the answer (``prose``) and what it writes after it (``tail``)."""
