"""The hot path's hand-written statements, each built once per database vendor.

Owns: the message inserts of send (``message_inserts``), the rows of other
models written in bulk (a workflow's steps, a topic's bodies: ``row_inserts``),
the claim and ack statements (``claim_statements``), the values prepared and
escaped as the ORM and the driver would (``prepared_values``), the statistics counters
(``stat_counters``), the hand-on of ordered groups and keys under
``group_concurrency`` (``group_statements``), the copy of finished task records
(``task_record_copy``),
a batch of rows passed to PostgreSQL as one JSON document (``json_rows``),
the SQL functions of the condition language (``condition_functions``), the
models' fields and column names as statements use them (``model_columns``), and the
SQL fragments that differ per database vendor (``vendor_sql``).
Each statement has a name and a docstring that says what it does and why it is
not left to the ORM.

May import: the rest of djqueue.storage, djqueue.models and below.
"""
