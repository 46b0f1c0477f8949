# The Spark nodes (master, workers) and the metastore service: the apache/spark 4.1 image with
# the Python Airflow's image has (3.11), in a venv holding tidemark's executor dependencies and
# the library itself, so executors run exactly what the driver (an Airflow task) runs.
FROM apache/spark:4.1.3-scala2.13-java17-ubuntu
USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends software-properties-common curl unzip \
 && add-apt-repository -y ppa:deadsnakes/ppa \
 && apt-get update \
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv \
 && curl -fsSL -o /opt/postgresql.jar https://jdbc.postgresql.org/download/postgresql-42.7.8.jar \
 && rm -rf /var/lib/apt/lists/*
RUN mkdir -p /opt/tidemark && mv /opt/postgresql.jar /opt/tidemark/postgresql.jar
# s3a for a lake on S3: hadoop-aws of Spark 4.1's own Hadoop (hadoop-client 3.4.2) and the AWS
# SDK v2 bundle that Hadoop release is built with (hadoop-project/pom.xml of rel/release-3.4.2).
# The metastore registers s3a:// locations with them; tidemark's jobs read and write table files
# through pyarrow, so executors need none (TIDEMARK_S3A_JARS puts them on the driver only).
ARG HADOOP_AWS=3.4.2
ARG AWS_SDK_BUNDLE=2.29.52
RUN mkdir -p /opt/tidemark/s3a-jars \
 && curl -fsSL -o /opt/tidemark/s3a-jars/hadoop-aws-${HADOOP_AWS}.jar \
      https://repo1.maven.org/maven2/org/apache/hadoop/hadoop-aws/${HADOOP_AWS}/hadoop-aws-${HADOOP_AWS}.jar \
 && curl -fsSL -o /opt/tidemark/s3a-jars/bundle-${AWS_SDK_BUNDLE}.jar \
      https://repo1.maven.org/maven2/software/amazon/awssdk/bundle/${AWS_SDK_BUNDLE}/bundle-${AWS_SDK_BUNDLE}.jar
COPY requirements.txt pyproject.toml /opt/tidemark/
COPY plugins /opt/tidemark/plugins
RUN python3.11 -m venv /opt/tidemark/venv \
 && /opt/tidemark/venv/bin/pip install --no-cache-dir -r /opt/tidemark/requirements.txt \
 && /opt/tidemark/venv/bin/pip install --no-cache-dir --no-deps /opt/tidemark
COPY docker/metastore.sh /opt/tidemark/metastore.sh
ENV PYSPARK_PYTHON=/opt/tidemark/venv/bin/python
USER spark
