"""Stage 1b of math verification: an extracted final answer as a typed ``Answer`` (``parse``), after normalizing
its text (``normalize``), with exact arithmetic (``arith``) and matrix arithmetic (``matrix``) on the numbers it
writes."""
