# Benchmarks (bench/README.md). `make bench` runs all three in under ten minutes on a 2-core
# machine; the test suite is `pytest` (see the README).
.PHONY: bench bench-routing bench-history bench-e2e

bench: bench-routing bench-history bench-e2e

bench-routing:
	python bench/routing.py --seconds 1 --repeats 5

bench-history:
	python bench/history.py --repeats 200

bench-e2e:
	python bench/e2e.py --repeats 3
