#!/bin/sh
# Usage: docker/pyspark-imports.sh PYTHON
#
# Makes Spark's Python processes import PySpark from site-packages, with its
# compiled bytecode, instead of from the copies zipped in the pip package.
#
# Why: Spark puts $SPARK_HOME/python/lib/pyspark.zip (and py4j's zip) first on
# every Python worker's PYTHONPATH. Python never caches bytecode for a zip, so
# each process it starts compiles PySpark's modules from source: 3.5-6 s of
# CPU on a 1.5-CPU container. A streaming Python data source starts such a
# process per query and gives it 10 s to connect back; a worker starting its
# queries together (every restart) missed that limit, query after query.
# Without the zips those path entries name nothing and Python falls through
# to the same PySpark version in site-packages (0.5 s). Run once after every
# install of pyspark (make deps, the worker image).
set -eu
python=${1:?usage: $0 PYTHON}
lib=$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "python", "lib"))')
"$python" -c 'import py4j' # site-packages has py4j too, so its zip can go as well
rm -f "$lib"/pyspark.zip "$lib"/py4j-*-src.zip
