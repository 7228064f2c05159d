"""What people read from the store: the report and status tables, a round's metrics, the gate's flips and
monitors, costs, model cards and exports. These modules only read (the monitors' rows are the one table they
write); the store's engine (``db``, ``schema``, ``catalog``, ``ingest``) and the round path's queries never import
them."""
