# Airflow 3.3 with Java 17 (spark-submit runs in the task, in client mode against the
# standalone master), tidemark's pinned requirements and the tidemark package: dags/, the
# plugin and the spark_jobs/ entry points at the paths the compose file gives.
FROM apache/airflow:3.3.2-python3.11
USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
# s3a for the driver's metastore client when the lake is on S3 (the same pair as the Spark
# nodes: docker/spark.Dockerfile); spark-submit puts them on the driver's class path only.
ARG HADOOP_AWS=3.4.2
ARG AWS_SDK_BUNDLE=2.29.52
RUN mkdir -p /opt/tidemark/s3a-jars \
 && curl -fsSL -o /opt/tidemark/s3a-jars/hadoop-aws-${HADOOP_AWS}.jar \
      https://repo1.maven.org/maven2/org/apache/hadoop/hadoop-aws/${HADOOP_AWS}/hadoop-aws-${HADOOP_AWS}.jar \
 && curl -fsSL -o /opt/tidemark/s3a-jars/bundle-${AWS_SDK_BUNDLE}.jar \
      https://repo1.maven.org/maven2/software/amazon/awssdk/bundle/${AWS_SDK_BUNDLE}/bundle-${AWS_SDK_BUNDLE}.jar \
 && chmod -R a+rX /opt/tidemark/s3a-jars
# PYSPARK_PYTHON names the Spark nodes' venv interpreter (docker/spark.Dockerfile); here, the
# driver's side of the same path is this image's Python, which holds the same packages.
RUN mkdir -p /opt/tidemark/venv/bin && ln -s "$(command -v python)" /opt/tidemark/venv/bin/python
USER airflow
COPY --chown=airflow:root requirements.txt pyproject.toml /opt/tidemark/
COPY --chown=airflow:root plugins /opt/tidemark/plugins
COPY --chown=airflow:root dags /opt/tidemark/dags
COPY --chown=airflow:root spark_jobs /opt/tidemark/spark_jobs
RUN pip install --no-cache-dir -r /opt/tidemark/requirements.txt \
 && pip install --no-cache-dir --no-deps -e /opt/tidemark
ENV TIDEMARK_PROJECT_ROOT=/opt/tidemark
