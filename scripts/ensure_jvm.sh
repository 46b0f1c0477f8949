#!/usr/bin/env bash
# Resolve the JVM artifacts of one or more profiles of jvm/pom.xml (kafka, s3a, ...) from Maven
# Central into a cache outside the repository, once: <cache>/<profile>-<digest of the pom>/ holds
# the jars and a .complete stamp written last; <cache>/<profile> points at the current one. A
# cache whose stamp exists is used as is (no mvn, no network). The cache is
# ${TIDEMARK_JVM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tidemark/jvm}.
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${TIDEMARK_JVM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tidemark/jvm}"
digest=$(sha256sum jvm/pom.xml | cut -c1-12)
mkdir -p "$cache"
for profile in "$@"; do
  target="$cache/$profile-$digest"
  if [[ ! -f "$target/.complete" ]]; then
    command -v mvn >/dev/null || { echo "tidemark: mvn (Apache Maven) is needed to fetch the JVM artifacts: apt-get install maven" >&2; exit 1; }
    echo "tidemark: fetching the '$profile' JVM artifacts of jvm/pom.xml from Maven Central (once) into $target"
    rm -rf "$target.partial"
    if ! mvn -B -f jvm/pom.xml -P "$profile" dependency:copy-dependencies \
      -DoutputDirectory="$target.partial" -DincludeScope=runtime > "$cache/$profile.mvn.log" 2>&1; then
      tail -40 "$cache/$profile.mvn.log" >&2
      echo "tidemark: mvn failed to fetch the '$profile' artifacts (log: $cache/$profile.mvn.log)" >&2
      exit 1
    fi
    rm -rf "$target"
    mv "$target.partial" "$target"
    touch "$target/.complete"
    echo "tidemark: $profile: $(ls "$target" | wc -l) jars, $(du -sh "$target" | cut -f1)"
  fi
  ln -sfn "$profile-$digest" "$cache/$profile.tmp" && mv -T "$cache/$profile.tmp" "$cache/$profile"
done
