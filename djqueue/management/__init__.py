"""manage.py commands: thin; each parses and checks its options and runs a class from below.

Their base (``database_ready.DatabaseReadyCommand``) starts them once their database
answers and holds djqueue's migrations; ``arguments`` holds the argument types they share.
"""
