"""The PySpark export of history and reports (``manage.py djqueue_export``).

Only this package imports PySpark, and only when an export runs: workers
never load it. Install it with ``pip install djqueue[export]``.
"""
