"""manage.py commands: thin; each parses and checks its options and runs a class from below.

Their base (``migrated.MigratedCommand``) refuses to start on a database whose djqueue
migrations are not all applied; ``arguments`` holds the argument types they share.
"""
