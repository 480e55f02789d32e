# djqueue: `make run` starts the demo, `make test` runs every check.
VENV ?= .venv
PY := $(VENV)/bin/python
SHELL := /bin/bash

.PHONY: run test docs venv lint check pytest bench bench-quick bench-databases bench-churn bench-flow bench-export bench-dashboard bench-metrics bench-affinity soak clean

run: $(VENV)/.installed
	scripts/run_demo.sh

test: $(VENV)/.installed
	scripts/run_tests.sh

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt scripts/find_python.sh
	scripts/ensure_system.sh build
	@python=$$(scripts/find_python.sh) && \
	  if [ ! -x $(PY) ] || ! $(PY) -c 'import sys' 2>/dev/null; then \
	    rm -rf $(VENV) && $$python -m venv $(VENV); fi && \
	  echo "djqueue: using $$($(PY) --version) at $(VENV) (from $$python)"
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	@$(PY) -c 'import django; print("djqueue: Django", django.get_version())'
	touch $@

docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict
	@echo "djqueue: the documentation site is in var/site (index.html)"

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

bench: $(VENV)/.installed
	scripts/ensure_system.sh mariadb redis postgres mysql
	scripts/bench_venv.sh
	$(PY) bench/suite.py
	$(PY) bench/databases.py

bench-databases: $(VENV)/.installed
	scripts/ensure_system.sh mariadb postgres mysql
	$(PY) bench/databases.py

bench-churn: $(VENV)/.installed
	scripts/ensure_system.sh postgres
	$(PY) bench/postgres_churn.py

bench-quick: $(VENV)/.installed
	scripts/ensure_system.sh mariadb
	$(PY) bench/suite.py --quick

bench-flow: $(VENV)/.installed
	scripts/ensure_system.sh mariadb
	$(PY) bench/flow_control.py

bench-export: $(VENV)/.installed
	scripts/ensure_system.sh mariadb spark
	$(PY) bench/export.py

bench-affinity: $(VENV)/.installed
	scripts/ensure_system.sh mariadb
	$(PY) bench/affinity.py

bench-dashboard: $(VENV)/.installed
	scripts/ensure_system.sh mariadb
	$(PY) bench/dashboard.py

bench-metrics: $(VENV)/.installed
	scripts/ensure_system.sh mariadb
	$(PY) bench/metrics.py

soak: $(VENV)/.installed
	scripts/ensure_system.sh mariadb
	$(PY) -m tests.faults.soak
	DJQUEUE_PERIODIC_RUN_SECONDS=185 DATABASE_URL=mysql://root@127.0.0.1:3306/test \
	    $(PY) -m pytest -p no:cacheprovider -q tests/maintenance/test_periodic.py \
	    -k test_three_schedulers_enqueue_once_per_tick
	DJQUEUE_ABSURD_RUN_SECONDS=60 DATABASE_URL=mysql://root@127.0.0.1:3306/test \
	    $(PY) -m pytest -p no:cacheprovider -q tests/maintenance/test_absurd_rows.py
	DJQUEUE_SPREAD_TOTAL=60000 DATABASE_URL=mysql://root@127.0.0.1:3306/test \
	    $(PY) -m pytest -p no:cacheprovider -q -s tests/placement/test_partition_servers.py
	DJQUEUE_ORDER_EXAMPLES=4 DATABASE_URL=mysql://root@127.0.0.1:3306/test \
	    $(PY) -m pytest -p no:cacheprovider -q tests/storage/test_ordered_groups.py \
	    -k test_property_per_group_order_under_random_interleavings
	DJQUEUE_PRODUCED_TOTAL=100000 DATABASE_URL=mysql://root@127.0.0.1:3306/test \
	    $(PY) -m pytest -p no:cacheprovider -q tests/worker/test_processes.py \
	    -k test_four_producers_four_workers_process_each_message_exactly_once

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache
