#!/usr/bin/env bash
# hadoop-aws and its AWS SDK for the pyspark wheel's Spark, which ships neither: Spark's Hive
# metastore client needs a Hadoop FileSystem for every location it registers, and an S3
# warehouse's partitions live at s3a:// locations. The only such jars on the registries are
# hadoop-aws 3.3.1 + aws-java-sdk-bundle 1.11.901 inside the sagemaker-pyspark 1.4.5 sdist
# (PyPI): fetched once into the venv (share/tidemark/s3a-jars). An unsupported version mix with
# the wheel's Hadoop 3.4 client, used only for registration and the tests' reads through the
# metastore; tidemark's jobs read and write table files through pyarrow. A production Spark
# ships its own matching hadoop-aws.
set -euo pipefail
venv=${1:-.venv}
target="$venv/share/tidemark/s3a-jars"
jars=(hadoop-aws-3.3.1.jar aws-java-sdk-bundle-1.11.901.jar)
if [[ -f "$target/${jars[0]}" && -f "$target/${jars[1]}" ]]; then
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "tidemark: fetching hadoop-aws 3.3.1 + AWS SDK (sagemaker-pyspark 1.4.5 sdist, ~180 MB, once)"
"$venv/bin/python" -m pip download --quiet --no-deps --no-binary :all: sagemaker-pyspark==1.4.5 -d "$work"
archive=$(ls "$work"/sagemaker_pyspark-1.4.5.tar.gz)
mkdir -p "$target"
for jar in "${jars[@]}"; do
  tar -xzf "$archive" -C "$work" "sagemaker_pyspark-1.4.5/deps/jars/$jar"
  mv "$work/sagemaker_pyspark-1.4.5/deps/jars/$jar" "$target/$jar"
done
echo "tidemark: s3a jars in $target"
