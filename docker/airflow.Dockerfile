# Airflow 3.3 with Java 17 (spark-submit runs in the task, in client mode against the
# standalone master), tidemark's pinned requirements and the tidemark package: dags/, the
# plugin and the spark_jobs/ entry points at the paths the compose file gives.
FROM apache/airflow:3.3.2-python3.11
USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
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
