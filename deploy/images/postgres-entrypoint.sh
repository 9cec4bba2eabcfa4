#!/bin/sh
# The parts of the official postgres image's entrypoint that deploy/compose.yaml uses: on an empty
# PGDATA, initdb with POSTGRES_USER/POSTGRES_PASSWORD, create POSTGRES_DB, run the scripts in
# /docker-entrypoint-initdb.d on a socket-only server; then run the server.
set -eu
if [ "${1:-}" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
    export POSTGRES_USER="${POSTGRES_USER:-postgres}" POSTGRES_DB="${POSTGRES_DB:-${POSTGRES_USER:-postgres}}"
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    initdb -D "$PGDATA" --username="$POSTGRES_USER" --pwfile="$pwfile" -E UTF8 --locale=C.UTF-8 \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f "$pwfile"
    echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    if [ "$POSTGRES_DB" != postgres ]; then
        psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
            -c "CREATE DATABASE \"$POSTGRES_DB\""
    fi
    for f in /docker-entrypoint-initdb.d/*; do
        case "$f" in
            *.sh) echo "running $f"; sh "$f" ;;
            *.sql) echo "running $f"; psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" -f "$f" ;;
        esac
    done
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    echo "database initialised"
fi
exec "$@"
