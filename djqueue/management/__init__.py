"""manage.py commands: thin; each parses and checks its options and runs a class from below."""
