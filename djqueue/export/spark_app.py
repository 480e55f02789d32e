"""The export as a plain PySpark application, for ``spark-submit``.

    spark-submit --jars /usr/share/java/mariadb-java-client.jar \\
        djqueue/export/spark_app.py --settings project.settings --out hdfs:///djqueue [...]

It takes the options of ``manage.py djqueue_export`` (its --master is ignored:
spark-submit's own decides) and reads the database named by the Django settings.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    if "--settings" in argv:
        at = argv.index("--settings")
        os.environ["DJANGO_SETTINGS_MODULE"] = argv[at + 1]
        del argv[at:at + 2]
    sys.path.insert(0, os.getcwd())
    import django

    django.setup()
    from django.core.management import call_command

    if "--master" not in argv:
        argv += ["--master", ""]
    call_command("djqueue_export", *argv)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
