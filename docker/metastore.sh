#!/usr/bin/env bash
# The Hive 2.3 Thrift metastore of Spark's own jars, on the compose stack's PostgreSQL: what
# `tidemark-dev services start metastore` runs natively (plugins/tidemark_dev/postgres.py).
#   metastore.sh init    create the schema, whole, once (a no-op when it validates)
#   metastore.sh serve   run the service on port 9083
set -euo pipefail
: "${POSTGRES_PASSWORD:?}"
conf=/tmp/metastore-conf
mkdir -p "$conf"
url="jdbc:postgresql://postgres:5432/hive_metastore"
cat > "$conf/hive-site.xml" <<XML
<?xml version="1.0"?>
<configuration>
  <property><name>javax.jdo.option.ConnectionURL</name><value>$url</value></property>
  <property><name>javax.jdo.option.ConnectionDriverName</name><value>org.postgresql.Driver</value></property>
  <property><name>javax.jdo.option.ConnectionUserName</name><value>tidemark</value></property>
  <property><name>javax.jdo.option.ConnectionPassword</name><value>${POSTGRES_PASSWORD}</value></property>
  <property><name>datanucleus.schema.autoCreateAll</name><value>false</value></property>
  <property><name>hive.metastore.schema.verification</name><value>false</value></property>
  <property><name>hive.async.log.enabled</name><value>false</value></property>
  <property><name>hive.metastore.warehouse.dir</name><value>${TIDEMARK_WAREHOUSE:-/lake/warehouse}</value></property>
  <property><name>fs.s3a.endpoint</name><value>${AWS_ENDPOINT_URL:-}</value></property>
  <property><name>fs.s3a.path.style.access</name><value>true</value></property>
  <property><name>fs.s3a.aws.credentials.provider</name><value>software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider</value></property>
</configuration>
XML
# s3a (docker/spark.Dockerfile) for a lake on S3; its keys come from the environment only
cp="$conf:/opt/spark/jars/*:/opt/tidemark/postgresql.jar:/opt/tidemark/s3a-jars/*"
case "${1:-serve}" in
  init)
    cd "$conf"
    unzip -o -q /opt/spark/jars/hive-metastore-*.jar package.jdo
    cat > schema.properties <<PROPS
javax.jdo.option.ConnectionURL=$url
javax.jdo.option.ConnectionDriverName=org.postgresql.Driver
javax.jdo.option.ConnectionUserName=tidemark
javax.jdo.option.ConnectionPassword=${POSTGRES_PASSWORD}
datanucleus.identifierFactory=datanucleus1
datanucleus.rdbms.useLegacyNativeValueStrategy=true
PROPS
    tool=(java -cp "$cp" org.datanucleus.store.schema.SchemaTool -api JDO -props schema.properties)
    "${tool[@]}" -validate package.jdo >/dev/null 2>&1 || "${tool[@]}" -create package.jdo
    ;;
  serve)
    exec java -Xmx1g -cp "$cp" org.apache.hadoop.hive.metastore.HiveMetaStore -p 9083
    ;;
  *)
    echo "usage: metastore.sh init|serve" >&2; exit 2
    ;;
esac
